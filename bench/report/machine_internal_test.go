package report

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestShortVersion(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"PostgreSQL 15.20 (Debian 15.20-1.pgdg120+1) on x86_64-pc-linux-gnu, compiled by gcc": "PostgreSQL 15.20",
		"PostgreSQL 17.2 on aarch64-apple-darwin23.6.0, compiled by Apple clang":              "PostgreSQL 17.2",
		"PostgreSQL 16beta1, compiled by Visual C++":                                          "PostgreSQL 16beta1",
		"odd": "odd",
	} {
		require.Equal(t, want, shortVersion(in))
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

func TestCPUModel(t *testing.T) {
	t.Parallel()
	x86 := writeFile(t, "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel\t\t: 85\n"+
		"model name\t: Intel(R) Xeon(R)   CPU @ 2.20GHz\n\nprocessor\t: 1\nmodel name\t: other\n")
	require.Equal(t, "Intel(R) Xeon(R) CPU @ 2.20GHz", cpuModel(x86))

	arm := writeFile(t, "processor\t: 0\nBogoMIPS\t: 108.00\n\nHardware\t: BCM2835\nModel\t\t: Raspberry Pi 4 Model B Rev 1.4\n")
	require.Equal(t, "BCM2835", cpuModel(arm))

	require.Empty(t, cpuModel(filepath.Join(t.TempDir(), "missing")))
}

func TestMemTotalMB(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "MemTotal:       16318460 kB\nMemFree:         1234567 kB\n")
	require.Equal(t, int64(15935), memTotalMB(path))
	require.Zero(t, memTotalMB(filepath.Join(t.TempDir(), "missing")))
}
