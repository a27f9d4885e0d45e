package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// runFila runs Fila's own benchmark, `go run ./cmd/fila bench`, from the
// repository root with the same rates, duration and drain size and the
// scenarios the goals need, and reads the JSON it writes. It runs after the peers, never beside them, so neither
// competes with the other for the machine. Its progress and tables go to
// stderr; the merged comparison is printed on stdout afterwards.
func runFila(ctx context.Context, o options, log *zap.Logger) (*results, error) {
	root, err := filepath.Abs(o.repoRoot)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(root, "cmd", "fila")); err != nil {
		return nil, fmt.Errorf("no cmd/fila under %s", root)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("go tool not found: %w", err)
	}
	tmp, err := os.CreateTemp("", "fila-bench-*.json")
	if err != nil {
		return nil, err
	}
	path := tmp.Name()
	_ = tmp.Close()
	defer os.Remove(path)

	rates := make([]string, len(o.rates))
	for i, r := range o.rates {
		rates[i] = strconv.Itoa(r)
	}
	args := []string{"run", "./cmd/fila", "bench",
		"--json", path,
		"--scenarios", o.filaScenarios,
		"--rates", strings.Join(rates, ","),
		"--duration", o.duration.String(),
		"--min-samples", strconv.Itoa(o.minSamples),
		"--drain-jobs", strconv.Itoa(o.drainJobs),
		"--chart", "", // its default would write an SVG into the repository root
	}
	if o.filaModes != "" {
		args = append(args, "--modes", o.filaModes)
	}
	cmd := exec.CommandContext(ctx, goTool, args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "FILA_DSN="+o.dsn)
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	// Its own process group, so that on Ctrl-C the interrupt reaches the
	// compiled fila binary under `go run` too, and it drops its databases.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) }
	cmd.WaitDelay = 30 * time.Second

	log.Info("running fila bench", zap.String("dir", root), zap.Strings("args", args))
	begin := time.Now()
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("go %s: %w", strings.Join(args[:3], " "), err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("read fila bench JSON: %w", err)
	}
	if len(r.Latency) == 0 && len(r.Throughput) == 0 {
		return nil, errors.New("fila bench wrote no results")
	}
	log.Info("fila bench done", zap.Duration("elapsed", time.Since(begin).Round(time.Second)))
	return &r, nil
}
