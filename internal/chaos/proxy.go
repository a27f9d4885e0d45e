package chaos

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// proxyMode is what a proxy does with traffic.
type proxyMode int32

const (
	// forward copies bytes both ways, as if the client were connected
	// directly.
	forward proxyMode = iota
	// blackhole keeps every socket open and accepts new connections, but
	// silently drops every byte in both directions: to both ends the
	// connection looks alive and says nothing, as a half-open TCP
	// connection does after a network partition.
	blackhole
	// refuse closes new connections at once (existing ones are forwarded),
	// as a server that is down does.
	refuse
)

// proxy is a TCP proxy on loopback in front of a server, whose traffic a
// scenario can drop or refuse.
type proxy struct {
	ln       net.Listener
	target   string
	mode     atomic.Int32
	accepted atomic.Int64

	mu      sync.Mutex
	changed chan struct{} // closed and replaced at each mode change
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// startProxy listens on a free loopback port and forwards to target (host:port).
func startProxy(target string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: target, changed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// addr is the proxy's host:port.
func (p *proxy) addr() string { return p.ln.Addr().String() }

// set switches the mode for existing and new connections.
func (p *proxy) set(m proxyMode) {
	p.mode.Store(int32(m))
	p.mu.Lock()
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

func (p *proxy) current() (proxyMode, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return proxyMode(p.mode.Load()), p.changed
}

// connections is how many connections the proxy has accepted.
func (p *proxy) connections() int64 { return p.accepted.Load() }

func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		if proxyMode(p.mode.Load()) == refuse || !p.track(client) {
			_ = client.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(client)
	}
}

func (p *proxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	if !p.track(server) {
		_ = server.Close()
		return
	}
	defer p.untrack(server)
	closed := make(chan struct{})
	var once sync.Once
	shut := func() {
		once.Do(func() {
			close(closed)
			_ = client.Close()
			_ = server.Close()
		})
	}
	var pipes sync.WaitGroup
	pipes.Add(2)
	go func() { defer pipes.Done(); p.pipe(client, server, nil); shut() }()
	go func() { defer pipes.Done(); p.pipe(server, client, closed); shut() }()
	pipes.Wait()
}

// pipe copies src to dst, dropping what it reads while blackholed. With
// hold set (the server's side), an end of src during a blackhole is kept
// from the client until the blackhole is over or the client leaves: a
// half-open connection hears nothing, not even a close.
func (p *proxy) pipe(src, dst net.Conn, hold <-chan struct{}) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if m, _ := p.current(); m != blackhole {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			for hold != nil {
				m, changed := p.current()
				if m != blackhole {
					break
				}
				select {
				case <-changed:
				case <-hold:
					return
				}
			}
			return
		}
	}
}

// close stops accepting, closes every connection and waits for the
// goroutines.
func (p *proxy) close() error {
	err := p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.set(forward) // release a pipe waiting for the blackhole to end
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
