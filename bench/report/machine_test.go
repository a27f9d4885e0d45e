package report_test

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/bench/report"
	"github.com/fila-run/fila/internal/testdb"
)

func TestDescribeMachine(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)

	m, err := report.DescribeMachine(context.Background(), db.Pool)
	require.NoError(t, err)
	require.Equal(t, runtime.Version(), m.GoVersion)
	require.Equal(t, runtime.GOOS, m.OS)
	require.Equal(t, runtime.GOARCH, m.Arch)
	require.Positive(t, m.CPUs)
	require.Positive(t, m.GOMAXPROCS)
	if runtime.GOOS == "linux" {
		require.NotEmpty(t, m.CPUModel)
		require.Positive(t, m.MemoryMB)
	}

	require.Regexp(t, `^PostgreSQL \d+(\.\d+)?$`, m.PostgresVersion)
	require.True(t, strings.HasPrefix(m.PostgresVersionFull, m.PostgresVersion))
	require.Contains(t, []string{"on", "off", "local", "remote_write", "remote_apply"}, m.SynchronousCommit)
	require.Contains(t, []string{"minimal", "replica", "logical"}, m.WALLevel)
	require.Contains(t, []string{"on", "off"}, m.Fsync)
	require.NotEmpty(t, m.SharedBuffers)

	s := m.String()
	require.NotContains(t, s, "\n")
	require.Contains(t, s, m.PostgresVersion)
	require.Contains(t, s, "synchronous_commit="+m.SynchronousCommit)

	raw, err := json.Marshal(m)
	require.NoError(t, err)
	var back map[string]any
	require.NoError(t, json.Unmarshal(raw, &back))
	require.Equal(t, m.WALLevel, back["wal_level"])
	require.Equal(t, m.PostgresVersion, back["postgres_version"])
}

func TestDescribeMachineWithoutDatabase(t *testing.T) {
	t.Parallel()
	m, err := report.DescribeMachine(context.Background(), nil)
	require.NoError(t, err)
	require.Empty(t, m.PostgresVersion)
	require.NotContains(t, m.String(), "PostgreSQL")
}

func TestMachineInfoString(t *testing.T) {
	t.Parallel()
	m := report.MachineInfo{
		GoVersion: "go1.26.8", OS: "linux", Arch: "amd64", CPUs: 8, GOMAXPROCS: 2,
		CPUModel: "AMD EPYC 7B13", MemoryMB: 16 * 1024,
		PostgresVersion: "PostgreSQL 15.20", SynchronousCommit: "on", WALLevel: "logical",
		Fsync: "on", SharedBuffers: "128MB",
	}
	require.Equal(t, "go1.26.8 linux/amd64, 8 CPUs (AMD EPYC 7B13), GOMAXPROCS=2, 16.0 GiB; "+
		"PostgreSQL 15.20, synchronous_commit=on, wal_level=logical, fsync=on, shared_buffers=128MB", m.String())
}
