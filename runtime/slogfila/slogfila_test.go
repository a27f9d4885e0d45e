package slogfila_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/internal/testrt"
	"github.com/fila-run/fila/runtime"
	"github.com/fila-run/fila/runtime/slogfila"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := testdb.DropTemplates(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(
			goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
			goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).triggerHealthCheck.func1"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// lines is a goroutine-safe buffer of JSON log lines.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lines) entries(t *testing.T) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		out = append(out, m)
	}
	return out
}

func TestFieldsLevelsAndNames(t *testing.T) {
	t.Parallel()
	var out lines
	log := slogfila.Logger(slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo})))
	log.Debug("not shown")
	log.Named("runtime").With(zap.String("worker_id", "w1")).Warn("lease lost",
		zap.Int64("job_id", 7), zap.Duration("took", 1500*time.Millisecond), zap.Error(errors.New("gone")),
		zap.Strings("queues", []string{"a", "b"}))
	log.Error("failed")

	got := out.entries(t)
	require.Len(t, got, 2, "the debug entry is below the handler's level")
	w := got[0]
	require.Equal(t, "WARN", w["level"])
	require.Equal(t, "lease lost", w["msg"])
	require.Equal(t, "runtime", w["logger"])
	require.Equal(t, "w1", w["worker_id"], "With's fields travel with the logger")
	require.EqualValues(t, 7, w["job_id"])
	require.Equal(t, "gone", w["error"])
	require.Equal(t, []any{"a", "b"}, w["queues"])
	require.Contains(t, w, "took")
	require.Equal(t, "ERROR", got[1]["level"])

	require.Equal(t, slog.LevelError+4, slogfila.Level(zapcore.DPanicLevel))
	require.Equal(t, slog.LevelDebug, slogfila.Level(zapcore.DebugLevel))
}

// A runtime given the adapter logs its start, each job and its stop
// through the program's slog handler, with Fila's own fields.
func TestRuntimeLogsThroughSlog(t *testing.T) {
	t.Parallel()
	db := testrt.Migrated(t)
	var out lines
	done := make(chan struct{}, 1)
	cfg := runtime.Config{
		DSN: db.DSN, ListenDSN: db.DirectDSN,
		Logger: slogfila.Logger(slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))),
		Kinds: []runtime.Kind{{Name: "k", Handler: func(context.Context, *runtime.Job) error {
			done <- struct{}{}
			return nil
		}}},
	}
	rt, err := runtime.New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- rt.Run(ctx) }()
	<-rt.Ready()
	id, err := runtime.Insert(context.Background(), db.Pool, "k", nil, nil)
	require.NoError(t, err)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the job did not run")
	}
	testrt.WaitFor(t, 10*time.Second, "the job completed", func() bool {
		j, err := runtime.GetJob(context.Background(), db.Pool, id)
		return err == nil && j.State == runtime.StateCompleted
	})
	cancel()
	require.NoError(t, <-errc)

	var started, stopped, completed bool
	for _, e := range out.entries(t) {
		switch e["msg"] {
		case "runtime started":
			started = e["logger"] == "runtime" && e["level"] == "INFO" && e["worker_id"] != nil
		case "runtime stopped":
			stopped = true
		case "job completed":
			completed = e["job_id"] == float64(id) && e["kind"] == "k"
		}
	}
	require.True(t, started, "runtime started, with its logger name and fields")
	require.True(t, completed, "the job's completion, at debug level, with its id and kind")
	require.True(t, stopped)
}
