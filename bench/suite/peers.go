package suite

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

	"github.com/fila-run/fila/bench"
)

// PeersDirDefault is where `fila bench --peers` looks for the bench/peers
// module: the repository's, from its root.
const PeersDirDefault = "bench/peers"

// PeerSystems are the peers `fila bench --peers` runs, the ones a team
// choosing a PostgreSQL job queue would compare: River (Go),
// graphile-worker and pg-boss (Node.js). The goals compare with the best of
// them. bench/peers also runs gue.
var PeerSystems = []string{bench.SystemRiver, bench.SystemGraphileWorker, bench.SystemPgBoss}

// peersUnavailable says why the peers could not run here at all (no
// module, no toolchain), as opposed to a run that failed.
type peersUnavailable string

func (e peersUnavailable) Error() string { return string(e) }

// peerResults is the part of bench/peers' JSON the suite merges.
type peerResults struct {
	Latency    []bench.LatencyResult    `json:"latency"`
	Throughput []bench.ThroughputResult `json:"throughput"`
}

// peers runs the bench/peers module in PeersDir with `go run`, on the same
// server, rates, duration and drain size as Fila's scenarios and with Fila
// left out, and adds the peers' rows to the results. It runs after Fila's
// scenarios, so neither competes with the other for the machine.
func (s *suite) peers(ctx context.Context) error {
	dir, err := filepath.Abs(s.opts.PeersDir)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return peersUnavailable("no bench/peers module at " + dir)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return peersUnavailable("no Go toolchain on PATH to run bench/peers")
	}
	tmp, err := os.CreateTemp("", "fila-peers-*.json")
	if err != nil {
		return err
	}
	path := tmp.Name()
	_ = tmp.Close()
	defer os.Remove(path)

	var scenarios []string
	if s.opts.has(ScenarioLatency) {
		scenarios = append(scenarios, ScenarioLatency)
	}
	if s.opts.has(ScenarioDrain) {
		scenarios = append(scenarios, ScenarioDrain)
	}
	if len(scenarios) == 0 {
		return errors.New("neither the latency nor the drain scenario was asked for")
	}
	rates := make([]string, len(s.opts.Rates))
	for i, r := range s.opts.Rates {
		rates[i] = strconv.Itoa(r)
	}
	args := []string{"run", ".", "--with-fila=false", "--systems", strings.Join(PeerSystems, ","),
		"--scenarios", strings.Join(scenarios, ","),
		"--rates", strings.Join(rates, ","),
		"--duration", s.opts.Duration.String(),
		"--min-samples", strconv.Itoa(max(s.opts.MinSamples, 0)),
		"--drain-jobs", strconv.Itoa(s.opts.DrainJobs),
		"--dsn", s.srv.adminDSN,
		"--json", path,
	}
	cmd := exec.CommandContext(ctx, goTool, args...)
	cmd.Dir = dir
	// Its progress log is progress here too; its tables are printed again
	// from the merged results.
	cmd.Stderr = s.opts.Progress
	// Its own process group, so that on Ctrl-C the interrupt reaches the
	// compiled binary under `go run` too, and it drops its databases.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) }
	cmd.WaitDelay = 30 * time.Second
	s.log.Info("running bench/peers", zap.String("dir", dir), zap.Strings("args", args))
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// It exits non-zero when one of its scenarios failed; what the
		// others measured is still in its JSON.
		s.res.note("peers: go %s: %v", strings.Join(args[:2], " "), err)
	}
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return fmt.Errorf("bench/peers wrote no results")
	}
	var pr peerResults
	if err := json.Unmarshal(b, &pr); err != nil {
		return fmt.Errorf("read bench/peers' JSON: %w", err)
	}
	if len(pr.Latency) == 0 && len(pr.Throughput) == 0 {
		return errors.New("bench/peers measured nothing")
	}
	s.res.Latency = append(s.res.Latency, pr.Latency...)
	s.res.Throughput = append(s.res.Throughput, pr.Throughput...)
	s.res.Peers = fmt.Sprintf("%s, run by bench/peers after Fila's scenarios", strings.Join(PeerSystems, ", "))
	return nil
}
