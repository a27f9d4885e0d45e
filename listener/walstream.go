package listener

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"go.uber.org/zap"

	"github.com/fila-run/fila/internal/channel"
)

// stream is the state of one replication connection.
type stream struct {
	// received is the furthest WAL position the server has reported
	// sending; it is reported as written, flushed and applied, since a
	// wake source keeps nothing and a temporary slot is never resumed, so
	// the slot need retain no WAL.
	received pglogrepl.LSN
	// queueCol maps a relation to the index of its queue column.
	queueCol map[uint32]int
	// woke holds the queues the current transaction has woken.
	woke map[string]bool
}

// serve reads the replication stream until the connection fails or ctx ends.
// Every StatusInterval it reports its position and asks for a reply; no
// traffic within PingTimeout after that means the connection is dead.
func (w *WAL) serve(ctx context.Context, conn *pgconn.PgConn) error {
	st := &stream{queueCol: map[uint32]int{}, woke: map[string]bool{}}
	nextStatus := time.Now().Add(w.cfg.StatusInterval)
	var replyBy time.Time // zero while no reply is awaited
	for {
		if now := time.Now(); !now.Before(nextStatus) {
			ask := replyBy.IsZero()
			if err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{
				WALWritePosition: st.received,
				ReplyRequested:   ask,
			}); err != nil {
				return fmt.Errorf("send standby status: %w", err)
			}
			if ask {
				replyBy = now.Add(w.cfg.PingTimeout)
			}
			nextStatus = now.Add(w.cfg.StatusInterval)
			w.log.Debug("standby status sent", zap.Stringer("lsn", st.received))
		}

		deadline := nextStatus
		if !replyBy.IsZero() && replyBy.Before(deadline) {
			deadline = replyBy
		}
		rctx, cancel := context.WithDeadline(ctx, deadline)
		msg, err := conn.ReceiveMessage(rctx)
		expired := rctx.Err() != nil
		cancel()
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return ctx.Err()
		case expired:
			if !replyBy.IsZero() && !time.Now().Before(replyBy) {
				return fmt.Errorf("health check: no reply to a standby status within %v", w.cfg.PingTimeout)
			}
			continue
		default:
			return fmt.Errorf("receive: %w", err)
		}
		replyBy = time.Time{} // any traffic proves the connection alive

		switch msg := msg.(type) {
		case *pgproto3.CopyData:
			replyNow, err := w.handleCopyData(st, msg.Data)
			if err != nil {
				return err
			}
			if replyNow {
				nextStatus = time.Time{}
			}
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("replication stream: %w", pgconn.ErrorResponseToPgError(msg))
		case *pgproto3.CopyDone:
			return errors.New("replication stream: the server ended it")
		}
	}
}

// handleCopyData handles one message of the stream, and reports whether the
// server asked for an immediate status reply.
func (w *WAL) handleCopyData(st *stream, data []byte) (bool, error) {
	if len(data) == 0 {
		return false, nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		pkm, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return false, fmt.Errorf("replication stream: %w", err)
		}
		st.received = max(st.received, pkm.ServerWALEnd)
		return pkm.ReplyRequested, nil
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return false, fmt.Errorf("replication stream: %w", err)
		}
		w.handleLogical(st, xld.WALData)
		// A logical message's bytes are pgoutput's, not WAL: its start plus
		// their length may lie past anything the server sent (a large
		// payload's text against its compressed tuple). Only the server's
		// own positions are reported, because a fast shutdown waits until
		// the client confirms exactly the position sent.
		st.received = max(st.received, xld.ServerWALEnd)
	}
	return false, nil
}

// handleLogical wakes the claimers of a queue on the first insert of each
// transaction into it, and on the update trigger's logical message naming it.
// Rows are not checked for state or run_at: a wake is only a hint, and
// comparing run_at would need this host's clock.
func (w *WAL) handleLogical(st *stream, data []byte) {
	if len(data) == 0 {
		return
	}
	if len(st.woke) == len(w.queueSet()) && pglogrepl.MessageType(data[0]) == pglogrepl.MessageTypeInsert {
		return // every queue is woken: the rest of a large insert needs no decoding
	}
	m, err := pglogrepl.Parse(data)
	if err != nil {
		// Waking for nothing costs one claim scan; missing an insert costs
		// a safety-poll interval.
		w.log.Debug("undecodable pgoutput message; waking", zap.Error(err))
		w.events.Add(1)
		w.wake()
		return
	}
	switch m := m.(type) {
	case *pglogrepl.BeginMessage:
		clear(st.woke)
	case *pglogrepl.RelationMessage:
		st.queueCol[m.RelationID] = -1
		for i, c := range m.Columns {
			if c.Name == "queue" {
				st.queueCol[m.RelationID] = i
			}
		}
	case *pglogrepl.InsertMessage:
		if q, ok := w.insertQueue(st, m); !ok {
			w.events.Add(1)
			w.wake() // cannot tell the queue: wake all rather than miss it
		} else if w.follows(q) {
			w.wakeOnce(st, q)
		}
	case *pglogrepl.LogicalDecodingMessage:
		if q := string(m.Content); m.Prefix == channel.MessagePrefix(w.cfg.Schema) && w.follows(q) {
			w.wakeOnce(st, q)
		}
	}
}

// MessagePrefix is the prefix of the logical messages the update trigger
// of the schema public emits, whose content is a queue name; another
// schema's carry channel.MessagePrefix(schema).
const MessagePrefix = "fila"

// insertQueue returns the queue of an inserted row, or false when it cannot
// tell.
func (w *WAL) insertQueue(st *stream, m *pglogrepl.InsertMessage) (string, bool) {
	i, ok := st.queueCol[m.RelationID]
	if !ok || i < 0 || m.Tuple == nil || i >= len(m.Tuple.Columns) {
		return "", false
	}
	col := m.Tuple.Columns[i]
	if col.DataType != pglogrepl.TupleDataTypeText {
		return "", false
	}
	return string(col.Data), true
}

func (w *WAL) wakeOnce(st *stream, queue string) {
	if st.woke[queue] {
		return
	}
	st.woke[queue] = true
	w.events.Add(1)
	w.log.Debug("job committed; waking", zap.String("queue", queue))
	w.wakeQueue(queue, 0) // a transaction of inserts names no single job
}
