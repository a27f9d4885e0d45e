package riverimport

import (
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
)

// Bounds of Config.BatchSize.
const (
	BatchSizeDefault = 1000
	BatchSizeMax     = 10000
)

// Config says what to import and how.
type Config struct {
	// River is the database River's tables are in. Defaults to nil: the
	// Fila database itself, in which case a batch's insert and its
	// deletion from river_job (Delete) commit in one transaction.
	River *pgxpool.Pool
	// Schema is the schema of River's tables. Defaults to "": the
	// connection's search_path.
	Schema string
	// BatchSize is how many River jobs one transaction moves, 1 to
	// BatchSizeMax. Defaults to BatchSizeDefault.
	BatchSize int
	// IncludeRunning imports River's running jobs as retryable ones
	// (pending, due now, the interrupted attempt counted), as River's own
	// rescuer would treat them once stuck. Only safe once every River
	// worker has stopped: otherwise a job may run in both. Without it an
	// import refuses to start while River has running jobs. Defaults to
	// false.
	IncludeRunning bool
	// IncludeFinished imports completed, cancelled and discarded jobs too,
	// as Fila's completed, cancelled and dead jobs (their history).
	// Defaults to false: they stay in River.
	IncludeFinished bool
	// Delete removes each moved job (and each found already imported)
	// from river_job: in the batch's transaction when River is in the
	// same database, else right after the batch commits. Defaults to
	// false: River's rows stay.
	Delete bool
	// DryRun reads and checks everything an import would move, and
	// counts it, but writes nothing. Defaults to false.
	DryRun bool
	// Logger receives the progress, one line per batch. Defaults to a
	// no-op logger.
	Logger *zap.Logger
}

// WithDefaults returns a copy of c with its zero fields filled.
func (c Config) WithDefaults() Config {
	if c.BatchSize == 0 {
		c.BatchSize = BatchSizeDefault
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c
}

// Validate names the first field out of range.
func (c Config) Validate() error {
	if c.BatchSize < 1 || c.BatchSize > BatchSizeMax {
		return fmt.Errorf("batch size %d out of range: allowed 1 to %d", c.BatchSize, BatchSizeMax)
	}
	if c.DryRun && c.Delete {
		return fmt.Errorf("a dry run deletes nothing: give either dry run or delete, not both")
	}
	return nil
}
