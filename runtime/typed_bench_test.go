package runtime

import (
	"context"
	"encoding/json"
	"testing"
)

type benchArgs struct {
	N int `json:"n"`
}

func (benchArgs) Kind() string { return "bench" }

// BenchmarkDispatch measures one handler call: untyped, typed (Work[T],
// which decodes the payload), and untyped decoding the same payload by
// hand with Job.Decode: what typing adds beyond the decode a handler would
// do anyway.
func BenchmarkDispatch(b *testing.B) {
	ctx := context.Background()
	job := &Job{ID: 1, Kind: "bench", Payload: json.RawMessage(`{"n": 1}`)}
	sink := 0
	untyped := Kind{Name: "bench", Handler: func(ctx context.Context, j *Job) error { sink++; return nil }}
	byHand := Kind{Name: "bench", Handler: func(ctx context.Context, j *Job) error {
		var a benchArgs
		if err := j.Decode(&a); err != nil {
			return err
		}
		sink += a.N
		return nil
	}}
	typed := Work(func(ctx context.Context, j *Job, a benchArgs) error { sink += a.N; return nil })
	for _, c := range []struct {
		name string
		k    Kind
	}{{"untyped", untyped}, {"untyped-decode", byHand}, {"typed", typed}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if err := runKind(ctx, c.k, job); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
