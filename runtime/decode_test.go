package runtime_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

func TestDecodeRefusesPayloadsThatAreNotObjects(t *testing.T) {
	t.Parallel()
	var s struct{ N int }
	var m map[string]any
	var anything any
	var list []int
	for _, p := range []string{`[1, 2]`, `"text"`, `42`, `true`, `null`, ` null `} {
		j := &runtime.Job{ID: 7, Kind: "k", Payload: json.RawMessage(p)}
		err := j.Decode(&s)
		require.Error(t, err, "payload %s into a struct", p)
		require.True(t, runtime.IsPermanent(err), "payload %s: %v", p, err)
		require.Contains(t, err.Error(), "job 7")
		require.Error(t, j.Decode(&m), "payload %s into a map", p)
	}
	null := &runtime.Job{Payload: json.RawMessage(`null`)}
	require.NoError(t, null.Decode(&anything), "null into an interface is null")
	require.NoError(t, null.Decode(&list), "null into a slice is a nil slice")
	require.NoError(t, (&runtime.Job{Payload: json.RawMessage(`{"N": 3}`)}).Decode(&s))
	require.Equal(t, 3, s.N)
}

// Decode's comment says which inserts store a null payload: every one
// whose payload is JSON null, and none whose payload is a nil interface.
func TestWhichInsertsStoreANullPayload(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	stored := func(payload any) string {
		id, err := runtime.Insert(ctx, db.Pool, "k", payload, nil)
		require.NoError(t, err)
		var text string
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT payload::text FROM fila_jobs WHERE id = $1::bigint", id).Scan(&text))
		return text
	}
	var nilPointer *struct{ N int }
	var nilMap map[string]any
	require.Equal(t, "null", stored(nilPointer))
	require.Equal(t, "null", stored(nilMap))
	require.Equal(t, "null", stored(json.RawMessage("null")))
	require.Equal(t, "{}", stored(nil))
}
