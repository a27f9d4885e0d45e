package chaos

import (
	"bytes"
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
)

// claimStatement is what the claim statements' text contains (fila_claim and
// fila_claim_id).
const claimStatement = "fila_claim"

// claimWatch makes a proxy lose the replies of claims that took jobs: it
// reads the PostgreSQL protocol the client sends to know when a claim is
// executed, holds the server's reply to it until the reply is whole (its
// ReadyForQuery: the claim has committed), and if the reply hands out a
// job while a loss is armed, closes both sides instead of forwarding it.
// The claim committed, and the worker never heard of it: the connection
// died between the claim's commit and its reply, as when a PgBouncer is
// killed under load. Any other reply goes on unchanged.
type claimWatch struct {
	armed atomic.Int64 // replies still to lose
	lost  atomic.Int64 // replies lost
	seen  atomic.Int64 // claim statements executed through the proxy
}

// startClaimProxy is a proxy in front of target that can lose the replies
// of claims.
func startClaimProxy(target string) (*proxy, error) { return listenProxy(target, &claimWatch{}) }

// loseClaimReplies arms the loss of the replies of the next n claims that
// take a job.
func (w *claimWatch) loseClaimReplies(n int) { w.armed.Add(int64(n)) }

// take uses one armed loss, if any is left.
func (w *claimWatch) take() bool {
	for {
		n := w.armed.Load()
		if n <= 0 {
			return false
		}
		if w.armed.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// Protocol codes of the untyped messages a client may start with.
const (
	sslRequestCode    = 80877103
	gssencRequestCode = 80877104
)

// claimConn is what a claimWatch knows of one connection.
type claimConn struct {
	startup      bool            // the client's next message is untyped (startup, SSL or GSS request)
	claimStmts   map[string]bool // prepared statements that are claims
	unnamedClaim bool            // the unnamed statement is a claim
	raw          bool            // the client's stream could not be parsed: forward as is
	// claiming: a claim was sent to the server, whose reply is held until
	// it is whole. The client waits for each reply before its next
	// statement, so the server's next bytes start that reply.
	claiming atomic.Bool
}

// serve forwards one connection.
func (w *claimWatch) serve(client, server net.Conn) {
	cc := &claimConn{startup: true, claimStmts: map[string]bool{}}
	var once sync.Once
	shut := func() {
		once.Do(func() {
			_ = client.Close()
			_ = server.Close()
		})
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.fromServer(server, client, cc)
		shut()
	}()
	w.fromClient(client, server, cc)
	shut()
	<-done
}

// fromClient forwards the client's messages to the server, noting the
// claims among them.
func (w *claimWatch) fromClient(client, server net.Conn, cc *claimConn) {
	buf := make([]byte, 32<<10)
	var pending []byte
	for {
		n, err := client.Read(buf)
		if n > 0 {
			pending = append(pending, buf[:n]...)
			var out []byte
			out, pending = w.inspect(pending, cc)
			if len(out) > 0 {
				if _, werr := server.Write(out); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// inspect splits b into the complete messages to forward and the rest,
// marking the connection as claiming when a claim is executed.
func (w *claimWatch) inspect(b []byte, cc *claimConn) (out, rest []byte) {
	if cc.raw {
		return b, nil
	}
	i := 0
	for {
		m := b[i:]
		if cc.startup {
			if len(m) < 8 {
				break
			}
			l := int(binary.BigEndian.Uint32(m))
			if l < 8 || l > 1<<20 {
				cc.raw = true
				return b, nil
			}
			if len(m) < l {
				break
			}
			code := binary.BigEndian.Uint32(m[4:8])
			cc.startup = code == sslRequestCode || code == gssencRequestCode
			i += l
			continue
		}
		if len(m) < 5 {
			break
		}
		l := 1 + int(binary.BigEndian.Uint32(m[1:5]))
		if l < 5 || l > 1<<30 {
			cc.raw = true
			return b, nil
		}
		if len(m) < l {
			break
		}
		body := m[5:l]
		switch m[0] {
		case 'P': // Parse: name, query
			name := cstring(body)
			query := cstring(body[min(len(body), len(name)+1):])
			isClaim := bytes.Contains(query, []byte(claimStatement))
			if len(name) == 0 {
				cc.unnamedClaim = isClaim
			} else {
				cc.claimStmts[string(name)] = isClaim
			}
		case 'B': // Bind: portal, statement
			portal := cstring(body)
			stmt := cstring(body[min(len(body), len(portal)+1):])
			if (len(stmt) == 0 && cc.unnamedClaim) || cc.claimStmts[string(stmt)] {
				w.seen.Add(1)
				cc.claiming.Store(true)
			}
		case 'Q': // a simple query
			if bytes.Contains(body, []byte(claimStatement)) {
				w.seen.Add(1)
				cc.claiming.Store(true)
			}
		}
		i += l
	}
	return b[:i], b[i:]
}

// fromServer forwards the server's bytes to the client, holding the reply
// to a claim until it is whole, and losing it if it hands out a job while
// a loss is armed.
func (w *claimWatch) fromServer(server, client net.Conn, cc *claimConn) {
	buf := make([]byte, 32<<10)
	var held []byte
	for {
		n, err := server.Read(buf)
		if n > 0 {
			if !cc.claiming.Load() && len(held) == 0 {
				if _, werr := client.Write(buf[:n]); werr != nil {
					return
				}
			} else {
				held = append(held, buf[:n]...)
				whole, jobs, ok := claimReply(held)
				switch {
				case !ok:
					// Not the protocol this expects: let it through.
					cc.claiming.Store(false)
					fallthrough
				case whole && !(jobs && w.take()):
					cc.claiming.Store(false)
					if _, werr := client.Write(held); werr != nil {
						return
					}
					held = held[:0]
				case whole:
					w.lost.Add(1)
					return // the caller closes both sides: the claim has committed
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// claimReply reads the messages of a claim's reply: whether it ends (a
// ReadyForQuery), whether a data row hands out a job (its first column,
// the job's id, is not NULL: the claim's summary row has a NULL id), and
// whether it parses at all.
func claimReply(b []byte) (whole, jobs, ok bool) {
	for len(b) >= 5 {
		l := 1 + int(binary.BigEndian.Uint32(b[1:5]))
		if l < 5 {
			return false, false, false
		}
		if len(b) < l {
			return false, jobs, true
		}
		switch b[0] {
		case 'D':
			if l >= 11 && int32(binary.BigEndian.Uint32(b[7:11])) >= 0 {
				jobs = true
			}
		case 'Z':
			return true, jobs, true
		}
		b = b[l:]
	}
	return false, jobs, true
}

// cstring is b up to its first NUL.
func cstring(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}
