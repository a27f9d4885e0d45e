package chaos

import (
	"errors"
	"net"
	"slices"
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
	// freeze stops forwarding, both ways, without closing anything: what
	// either end sends is held (an end of the connection too) and delivered
	// once the mode changes, as TCP retransmits what a network path that
	// went silent dropped, once it heals. New connections are accepted and
	// held the same way.
	freeze
	// reset tears down every connection with a TCP reset, both ways, and
	// resets new ones at once: the partition a client learns of at its
	// next read or write, as after a firewall's reject or a peer's reboot.
	reset
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

	// claims, if set, reads what clients send, to lose the replies of
	// claim statements (see claimWatch).
	claims *claimWatch
}

// startProxy listens on a free loopback port and forwards to target (host:port).
func startProxy(target string) (*proxy, error) { return listenProxy(target, nil) }

// listenProxy starts a proxy to target, reading its clients' statements
// with claims if set.
func listenProxy(target string, claims *claimWatch) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: target, changed: make(chan struct{}), conns: map[net.Conn]struct{}{}, claims: claims}
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
	if m == reset {
		for c := range p.conns {
			resetConn(c)
		}
	}
	p.mu.Unlock()
}

// resetConn closes c with a TCP reset rather than an orderly close.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
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
		switch m := proxyMode(p.mode.Load()); {
		case m == reset:
			resetConn(client)
			continue
		case m == refuse || !p.track(client):
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
	if p.claims != nil {
		p.claims.serve(client, server)
		return
	}
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
	go func() { defer pipes.Done(); p.pipe(client, server, closed, false); shut() }()
	go func() { defer pipes.Done(); p.pipe(server, client, closed, true); shut() }()
	pipes.Wait()
}

// pipe copies src to dst, dropping what it reads while blackholed and
// holding it while frozen, until the connection is closed. With holdEOF
// set (the server's side), an end of src during a blackhole is kept from
// the client until the blackhole is over or the client leaves: a half-open
// connection hears nothing, not even a close. During a freeze an end is
// held both ways.
func (p *proxy) pipe(src, dst net.Conn, closed <-chan struct{}, holdEOF bool) {
	buf := make([]byte, 32<<10)
	// thaw waits while the mode is one of held; false if the connection
	// closed meanwhile.
	thaw := func(held ...proxyMode) bool {
		for {
			m, changed := p.current()
			if !slices.Contains(held, m) {
				return true
			}
			select {
			case <-changed:
			case <-closed:
				return false
			}
		}
	}
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !thaw(freeze) {
				return
			}
			if m, _ := p.current(); m != blackhole {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			if holdEOF {
				thaw(blackhole, freeze)
			} else {
				thaw(freeze)
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
	p.set(forward) // release a pipe waiting for a blackhole or a freeze to end
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
