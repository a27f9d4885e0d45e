package chaos

import (
	"os"
	"regexp"
	"slices"
	"testing"
)

// Every function the claimer calls as a statement of its own must count as
// a bounded blocker: a wait behind it lasts at most that one statement. A
// new one left out of filaStatements fails TestLockWaits on a busy machine,
// where such waits show up in two samples.
func TestSamplerKnowsEveryClaimerStatement(t *testing.T) {
	src, err := os.ReadFile("../../claimer/sql.go")
	if err != nil {
		t.Fatal(err)
	}
	calls := regexp.MustCompile(`(?:FROM|SELECT) (fila_[a-z_]+)\(`).FindAllSubmatch(src, -1)
	if len(calls) < 5 {
		t.Fatalf("found only %d calls of Fila's functions in claimer/sql.go: has its form changed?", len(calls))
	}
	for _, c := range calls {
		if name := string(c[1]) + "("; !slices.Contains(filaStatements, name) {
			t.Errorf("claimer/sql.go calls %s as a statement of its own, but the lock sampler does not count it as bounded", name)
		}
	}
	for _, direct := range regexp.MustCompile(`/\* fila_[a-z_]+ \*/`).FindAll(src, -1) {
		if !slices.Contains(filaStatements, string(direct)) {
			t.Errorf("claimer/sql.go sends %s directly, but the lock sampler does not count it as bounded", direct)
		}
	}
}

func TestBlameCountsOnlyFilaStatementsAsBounded(t *testing.T) {
	for _, c := range []struct {
		state, query string
		bounded      bool
	}{
		{"active", "SELECT ids, attempts, started FROM fila_complete($1::bigint[], $2::int[], $3::timestamptz[])", true},
		{"active", "/* fila_claim_id */ UPDATE fila_jobs j SET", true},
		{"idle in transaction", "SELECT ids, attempts, started FROM fila_complete($1)", false},
		{"active", "UPDATE fila_jobs SET priority = 1", false},
		{"", "", true},
	} {
		var w lockWait
		w.blame(c.state, c.query)
		if w.bounded != c.bounded {
			t.Errorf("blame(%q, %q): bounded %v, want %v", c.state, c.query, w.bounded, c.bounded)
		}
	}
}
