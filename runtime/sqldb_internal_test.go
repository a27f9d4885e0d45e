package runtime

import (
	"database/sql"
	"testing"
)

// A database/sql handle offers no COPY: InsertMany must not take its COPY
// path there, whatever the batch's size.
func TestSQLIsNoCopier(t *testing.T) {
	if _, ok := SQL(&sql.DB{}).(copier); ok {
		t.Fatal("runtime.SQL's DB offers CopyFrom, which database/sql cannot do")
	}
}
