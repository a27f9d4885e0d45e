package suite

import (
	"runtime/metrics"
	"syscall"
	"time"
)

// procCPU is the CPU time this process has used, and the part the garbage
// collector used, so a scenario's Go cost per job can be read off
// (everything the process does counts: the runtime under test, the
// progress line, the bench's own polling).
type procCPU struct {
	total, gc time.Duration
}

// gcCPUMetric is the Go runtime's estimate of the CPU its collector used.
const gcCPUMetric = "/cpu/classes/gc/total:cpu-seconds"

func readProcCPU() procCPU {
	var c procCPU
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		c.total = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	sample := []metrics.Sample{{Name: gcCPUMetric}}
	metrics.Read(sample)
	if sample[0].Value.Kind() == metrics.KindFloat64 {
		c.gc = time.Duration(sample[0].Value.Float64() * float64(time.Second))
	}
	return c
}

func (c procCPU) sub(o procCPU) procCPU { return procCPU{total: c.total - o.total, gc: c.gc - o.gc} }
