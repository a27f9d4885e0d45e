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

// buildPeers compiles the bench/peers module in PeersDir once, before any
// scenario, so that its rows can be taken between Fila's (runPeers). It
// returns the binary, the module's directory and a func that removes the
// binary.
func (s *suite) buildPeers(ctx context.Context) (bin, dir string, remove func(), err error) {
	dir, err = filepath.Abs(s.opts.PeersDir)
	if err != nil {
		return "", "", nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return "", "", nil, peersUnavailable("no bench/peers module at " + dir)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", "", nil, peersUnavailable("no Go toolchain on PATH to run bench/peers")
	}
	if !s.opts.has(ScenarioLatency) && !s.opts.has(ScenarioDrain) {
		return "", "", nil, errors.New("neither the latency nor the drain scenario was asked for")
	}
	tmp, err := os.MkdirTemp("", "fila-peers-")
	if err != nil {
		return "", "", nil, err
	}
	remove = func() { _ = os.RemoveAll(tmp) }
	bin = filepath.Join(tmp, "peers")
	s.log.Info("building bench/peers", zap.String("dir", dir))
	cmd := exec.CommandContext(ctx, goTool, "build", "-o", bin, ".")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		remove()
		return "", "", nil, fmt.Errorf("go build in %s: %v: %s", dir, err, strings.TrimSpace(string(out)))
	}
	return bin, dir, remove, nil
}

// runPeers runs the peers' rows of one scenario (at one rate, for the
// latency scenario) with the binary buildPeers made, on the same server,
// duration and drain size as Fila's and with Fila left out, and adds them
// to the results. Fila's scenarios call it right after their own row of
// the same rate, so that a stall of the machine falls on rows taken at the
// same moment and every same-run ratio compares neighbours. A failure is
// noted; the rows measured still count.
func (s *suite) runPeers(ctx context.Context, scenario string, rate int) error {
	if s.peerBin == "" {
		return nil
	}
	tmp, err := os.CreateTemp("", "fila-peers-*.json")
	if err != nil {
		return err
	}
	path := tmp.Name()
	_ = tmp.Close()
	defer os.Remove(path)

	args := []string{"--with-fila=false", "--systems", strings.Join(PeerSystems, ","),
		"--scenarios", scenario,
		"--duration", s.opts.Duration.String(),
		"--min-samples", strconv.Itoa(max(s.opts.MinSamples, 0)),
		"--drain-jobs", strconv.Itoa(s.opts.DrainJobs),
		"--dsn", s.srv.adminDSN,
		"--json", path,
	}
	if scenario == ScenarioLatency {
		args = append(args, "--rates", strconv.Itoa(rate))
	}
	cmd := exec.CommandContext(ctx, s.peerBin, args...)
	cmd.Dir = s.peerDir
	// Its progress log is progress here too; its tables are printed again
	// from the merged results.
	cmd.Stderr = s.opts.Progress
	// Its own process group, so that on Ctrl-C the interrupt reaches the
	// Node.js peers it starts too, and it drops its databases.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) }
	cmd.WaitDelay = 30 * time.Second
	s.log.Info("running bench/peers", zap.Strings("args", args))
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// It exits non-zero when one of its scenarios failed; what the
		// others measured is still in its JSON.
		s.res.note("peers: %s %s: %v", scenario, strings.Join(args, " "), err)
	}
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return fmt.Errorf("bench/peers wrote no results for %s", scenario)
	}
	var pr peerResults
	if err := json.Unmarshal(b, &pr); err != nil {
		return fmt.Errorf("read bench/peers' JSON: %w", err)
	}
	s.res.Latency = append(s.res.Latency, pr.Latency...)
	s.res.Throughput = append(s.res.Throughput, pr.Throughput...)
	if len(pr.Latency)+len(pr.Throughput) > 0 {
		s.res.Peers = fmt.Sprintf("%s, run by bench/peers rate by rate right after Fila's rows", strings.Join(PeerSystems, ", "))
	}
	return nil
}
