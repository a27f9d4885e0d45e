package riverimport_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/fila-run/fila/internal/testdb"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := testdb.DropTemplates(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}
