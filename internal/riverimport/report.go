package riverimport

import (
	"cmp"
	"slices"
)

// Count is how many River jobs of one state and kind an import moved (or
// would move, in a dry run), and the Fila state they became.
type Count struct {
	State string // River's
	Kind  string
	To    string // Fila's
	Jobs  int64
}

// Left is how many River jobs of one state an import leaves where they are,
// and why.
type Left struct {
	State  string
	Jobs   int64
	Reason string
}

// Report says what an import did.
type Report struct {
	DryRun bool
	// Moved lists the jobs moved, by River state and kind.
	Moved []Count
	// AlreadyImported counts the River jobs found moved already (in
	// fila_river_imports), which did not move again.
	AlreadyImported int64
	// Deleted counts the rows removed from river_job (Config.Delete).
	Deleted int64
	// Left lists River's jobs of the states that do not move.
	Left []Left
	// Batches counts the transactions that moved jobs.
	Batches int
}

// MovedTotal is the number of jobs moved.
func (r *Report) MovedTotal() int64 {
	var n int64
	for _, c := range r.Moved {
		n += c.Jobs
	}
	return n
}

// tally counts moved jobs as the batches go.
type tally map[[3]string]int64

func (t tally) add(state, kind, to string) { t[[3]string{state, kind, to}]++ }

func (t tally) counts() []Count {
	out := make([]Count, 0, len(t))
	for k, n := range t {
		out = append(out, Count{State: k[0], Kind: k[1], To: k[2], Jobs: n})
	}
	slices.SortFunc(out, func(a, b Count) int {
		return cmp.Or(cmp.Compare(a.State, b.State), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.To, b.To))
	})
	return out
}
