package metrics_test

import (
	"testing"
	"time"

	"github.com/fila-run/fila/runtime"
	"github.com/fila-run/fila/runtime/metrics"
)

// The Observer's methods run on the runtime's hot path: after a queue's
// and a kind's first event they take no lock and allocate nothing.

func BenchmarkFinished(b *testing.B) {
	m := metrics.New(metrics.Options{})
	job := &runtime.Job{Kind: "send-welcome", Queue: "default"}
	b.ReportAllocs()
	for b.Loop() {
		m.Finished(job, runtime.OutcomeCompleted, 3*time.Millisecond)
	}
}

func BenchmarkFinishedParallel(b *testing.B) {
	m := metrics.New(metrics.Options{})
	job := &runtime.Job{Kind: "send-welcome", Queue: "default"}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Finished(job, runtime.OutcomeCompleted, 3*time.Millisecond)
		}
	})
}

func BenchmarkClaimed(b *testing.B) {
	for _, n := range []int{0, 1, 100} {
		b.Run(map[int]string{0: "none", 1: "one_job", 100: "100_jobs"}[n], func(b *testing.B) {
			m := metrics.New(metrics.Options{})
			jobs := make([]*runtime.Job, n)
			for i := range jobs {
				jobs[i] = &runtime.Job{Queue: "default", Wait: time.Duration(i+1) * time.Millisecond}
			}
			b.ReportAllocs()
			for b.Loop() {
				m.Claimed("default", jobs, 0)
			}
		})
	}
}

func BenchmarkWoken(b *testing.B) {
	m := metrics.New(metrics.Options{})
	b.ReportAllocs()
	for b.Loop() {
		m.Woken("default", runtime.WakeNotify)
	}
}
