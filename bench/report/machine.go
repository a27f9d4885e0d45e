package report

import (
	"bufio"
	"context"
	"fmt"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// MachineInfo describes where a benchmark ran: the host, the Go runtime, and
// the PostgreSQL settings that most change commit latency. It is stored with
// every result file and printed in every run's header, so numbers are never
// compared without their setting.
type MachineInfo struct {
	GoVersion  string `json:"go_version"`
	OS         string `json:"os"`
	Arch       string `json:"arch"`
	CPUs       int    `json:"cpus"`       // logical CPUs usable by this process
	GOMAXPROCS int    `json:"gomaxprocs"` // may be lower than CPUs under a container CPU limit
	CPUModel   string `json:"cpu_model,omitempty"`
	MemoryMB   int64  `json:"memory_mb,omitempty"` // total physical memory

	PostgresVersion     string `json:"postgres_version,omitempty"`      // "PostgreSQL 15.20"
	PostgresVersionFull string `json:"postgres_version_full,omitempty"` // version() as the server says it
	SynchronousCommit   string `json:"synchronous_commit,omitempty"`
	WALLevel            string `json:"wal_level,omitempty"`
	Fsync               string `json:"fsync,omitempty"`
	SharedBuffers       string `json:"shared_buffers,omitempty"`
	// TLS is whether the describing connection is encrypted ("on" or
	// "off"): with PlainTransport, every system's connections are alike.
	TLS string `json:"tls,omitempty"`
}

// settingsQuery reads the server's version, the settings that decide how
// much a COMMIT costs, and whether this connection is encrypted.
const settingsQuery = `SELECT version(),
	current_setting('synchronous_commit'),
	current_setting('wal_level'),
	current_setting('fsync'),
	current_setting('shared_buffers'),
	coalesce((SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()), false)`

// DescribeMachine gathers MachineInfo. The CPU model and memory come from
// /proc and are left empty where it does not exist (not Linux). pool may be
// nil to describe the host only. On a query error the host part is still
// returned, with the error.
func DescribeMachine(ctx context.Context, pool *pgxpool.Pool) (MachineInfo, error) {
	m := MachineInfo{
		GoVersion:  goruntime.Version(),
		OS:         goruntime.GOOS,
		Arch:       goruntime.GOARCH,
		CPUs:       goruntime.NumCPU(),
		GOMAXPROCS: goruntime.GOMAXPROCS(0),
		CPUModel:   cpuModel("/proc/cpuinfo"),
		MemoryMB:   memTotalMB("/proc/meminfo"),
	}
	if pool == nil {
		return m, nil
	}
	var tls bool
	err := pool.QueryRow(ctx, settingsQuery).Scan(
		&m.PostgresVersionFull, &m.SynchronousCommit, &m.WALLevel, &m.Fsync, &m.SharedBuffers, &tls)
	if err != nil {
		return m, fmt.Errorf("describe machine: query postgres settings: %w", err)
	}
	m.TLS = "off"
	if tls {
		m.TLS = "on"
	}
	m.PostgresVersion = shortVersion(m.PostgresVersionFull)
	return m, nil
}

// String is a one-line summary for a run's header, such as
//
//	go1.26.8 linux/amd64, 2 CPUs (AMD EPYC 7B13), 7.8 GiB; PostgreSQL 15.20, synchronous_commit=on, wal_level=logical, fsync=on, shared_buffers=128MB
func (m MachineInfo) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s/%s, %d CPUs", m.GoVersion, m.OS, m.Arch, m.CPUs)
	if m.CPUModel != "" {
		fmt.Fprintf(&b, " (%s)", m.CPUModel)
	}
	if m.GOMAXPROCS != 0 && m.GOMAXPROCS != m.CPUs {
		fmt.Fprintf(&b, ", GOMAXPROCS=%d", m.GOMAXPROCS)
	}
	if m.MemoryMB > 0 {
		fmt.Fprintf(&b, ", %.1f GiB", float64(m.MemoryMB)/1024)
	}
	if m.PostgresVersion != "" {
		fmt.Fprintf(&b, "; %s, synchronous_commit=%s, wal_level=%s, fsync=%s, shared_buffers=%s",
			m.PostgresVersion, m.SynchronousCommit, m.WALLevel, m.Fsync, m.SharedBuffers)
	}
	if m.TLS != "" {
		fmt.Fprintf(&b, ", TLS %s", m.TLS)
	}
	return b.String()
}

// shortVersion keeps the first two words of version(): "PostgreSQL 15.20 on
// x86_64-pc-linux-gnu, compiled by …" becomes "PostgreSQL 15.20". Builds
// that append to the number ("15.20 (Debian 15.20-1.pgdg120+1)") keep only
// the number, which is what a reader compares.
func shortVersion(full string) string {
	f := strings.Fields(full)
	if len(f) < 2 {
		return full
	}
	return f[0] + " " + strings.TrimRight(f[1], ",")
}

// cpuModel returns the first "model name" in a /proc/cpuinfo-style file, or
// on ARM, where there is none, the "Hardware" or "Model" line; "" if none is
// there or the file cannot be read.
func cpuModel(path string) string {
	found := map[string]string{}
	scanLines(path, func(key, value string) bool {
		switch key {
		case "model name", "Hardware", "Model":
			if _, ok := found[key]; !ok {
				found[key] = value
			}
		}
		return found["model name"] == ""
	})
	for _, k := range []string{"model name", "Hardware", "Model"} {
		if v := found[k]; v != "" {
			return strings.Join(strings.Fields(v), " ") // some CPUs pad their names with runs of spaces
		}
	}
	return ""
}

// memTotalMB returns MemTotal from a /proc/meminfo-style file in MiB, or 0.
func memTotalMB(path string) int64 {
	var mb int64
	scanLines(path, func(key, value string) bool {
		if key != "MemTotal" {
			return true
		}
		f := strings.Fields(value) // "16318460 kB"
		if len(f) == 2 && f[1] == "kB" {
			if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				mb = kb / 1024
			}
		}
		return false
	})
	return mb
}

// scanLines calls fn with each "key: value" line of path, trimmed, until fn
// returns false. A file that cannot be read has no lines.
func scanLines(path string, fn func(key, value string) bool) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		key, value, ok := strings.Cut(s.Text(), ":")
		if !ok {
			continue
		}
		if !fn(strings.TrimSpace(key), strings.TrimSpace(value)) {
			return
		}
	}
}
