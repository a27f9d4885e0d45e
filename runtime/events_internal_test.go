package runtime

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// A full buffer drops and counts each event, and warns once per burst: a
// read that makes room ends the burst, and the next drop warns again.
func TestDropsWarnOncePerBurst(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	h := newEventHub(zap.New(core))
	sub, err := h.subscribe(EventFilter{Buffer: 1})
	require.NoError(t, err)
	ev := Event{Kind: EventCompleted, Queue: "default", Job: &Job{ID: 1, Kind: "k"}}
	h.publish(ev, ev, ev)
	require.EqualValues(t, 2, sub.Dropped())
	require.Equal(t, 1, logs.Len())
	<-sub.Events()
	h.publish(ev, ev, ev) // one delivered, two dropped: a second burst
	require.EqualValues(t, 4, sub.Dropped())
	require.Equal(t, 2, logs.Len())
	require.Equal(t, uint64(3), logs.All()[1].ContextMap()["dropped_total"], "the count when the burst began")
	h.close()
	_, open := <-sub.Events()
	require.True(t, open, "what was buffered is still read after the close")
	_, open = <-sub.Events()
	require.False(t, open)
	sub.Close() // after the hub's close: nothing to do
}
