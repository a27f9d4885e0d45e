package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fila-run/fila/internal/channel"
)

// Job flows: dependencies (InsertOpts.After, InsertWorkflow), sequences
// (InsertOpts.Sequence) and batches (InsertBatch). The database holds them
// (migration 0023): a job that waits is in the state waiting, which no
// claim takes, and the finish of what it waits for makes it pending.

// What a job does when one of its dependencies ends dead or cancelled
// (InsertOpts.OnDependencyFailure).
const (
	// DependencyFailureDead: the job ends dead without running, its
	// last_error naming the dependency. The default.
	DependencyFailureDead = "dead"
	// DependencyFailureCancel: the job ends cancelled without running.
	DependencyFailureCancel = "cancel"
	// DependencyFailureRun: the job runs anyway once every dependency
	// finished, whatever their outcome.
	DependencyFailureRun = "run"
)

// What a sequence does when one of its jobs ends dead
// (InsertOpts.SequenceOnDead).
const (
	// SequenceDeadBlock: the next job waits until the dead one is retried
	// (and completes) or deleted. The default: order is what a sequence
	// promises.
	SequenceDeadBlock = "block"
	// SequenceDeadContinue: the next job runs as if the dead one had
	// completed.
	SequenceDeadContinue = "continue"
)

// Bounds of the flow options.
const (
	DependenciesMax = 1000
	SequenceKeyMax  = 200
)

// prepareFlow checks and copies a job's flow options.
func prepareFlow(r *insertRow, o InsertOpts) error {
	if len(o.After) > DependenciesMax {
		return fmt.Errorf("After: %d dependencies, at most %d", len(o.After), DependenciesMax)
	}
	for _, id := range o.After {
		if id <= 0 {
			return fmt.Errorf("After: %d is not a job id", id)
		}
		if !slices.Contains(r.dependsOn, id) {
			r.dependsOn = append(r.dependsOn, id)
		}
	}
	switch o.OnDependencyFailure {
	case "":
	case DependencyFailureDead, DependencyFailureCancel, DependencyFailureRun:
		if len(o.After) == 0 && !r.inWorkflow {
			return errors.New("OnDependencyFailure is set without dependencies (After)")
		}
		p := o.OnDependencyFailure
		r.depFailure = &p
	default:
		return fmt.Errorf("OnDependencyFailure %q: use %s, %s or %s", o.OnDependencyFailure,
			DependencyFailureDead, DependencyFailureCancel, DependencyFailureRun)
	}
	if o.Sequence != "" {
		if len(o.Sequence) > SequenceKeyMax {
			return fmt.Errorf("Sequence: %d bytes, at most %d", len(o.Sequence), SequenceKeyMax)
		}
		k := o.Sequence
		r.sequence = &k
	}
	switch o.SequenceOnDead {
	case "":
	case SequenceDeadBlock, SequenceDeadContinue:
		if o.Sequence == "" {
			return errors.New("SequenceOnDead is set without a Sequence")
		}
		p := o.SequenceOnDead
		r.sequenceOnDead = &p
	default:
		return fmt.Errorf("SequenceOnDead %q: use %s or %s", o.SequenceOnDead, SequenceDeadBlock, SequenceDeadContinue)
	}
	if o.Batch < 0 {
		return fmt.Errorf("Batch %d is not a batch id", o.Batch)
	}
	if o.Batch > 0 {
		b := o.Batch
		r.batch = &b
	}
	if r.hasFlow() && r.uniqueKey != nil {
		return errors.New("UniqueKey cannot be combined with After, Sequence or Batch")
	}
	return nil
}

// ValidateInsertOpts checks the options of one job as an insert would,
// with an error naming the option at fault: for a command line that
// refuses bad input before it connects.
func ValidateInsertOpts(o *InsertOpts) error {
	var r insertRow
	if err := prepareUnique(&r, *o); err != nil {
		return err
	}
	return prepareFlow(&r, *o)
}

// hasFlow says the job takes part in a flow, and so is written by
// insertFlowSQL.
func (r insertRow) hasFlow() bool {
	return len(r.dependsOn) > 0 || r.sequence != nil || r.batch != nil || r.hasDependents || r.inWorkflow
}

const (
	// insertFlowSQL writes jobs with flows in one statement, in the order
	// given: the table's insert trigger (fila_flow_insert) links each job
	// to what it waits for, which may be earlier rows of the same
	// statement. A job's dependencies travel joined by commas (an array of
	// arrays must be rectangular). An id of 0 takes the next of the
	// identity's sequence.
	insertFlowSQL = `INSERT INTO fila_jobs (id, queue, kind, payload, priority, run_at, max_attempts, tags, metadata,
    depends_on, dependency_failure, has_dependents, sequence_key, sequence_on_dead, batch_id, workflow_id, workflow_step, policy)
OVERRIDING SYSTEM VALUE
SELECT CASE WHEN i > 0 THEN i ELSE nextval((SELECT pg_get_serial_sequence('fila_jobs', 'id')::regclass)) END,
       q, k, p::jsonb, pr, coalesce(ra, now()), ma, string_to_array(tg, E'\x1f'), md::jsonb,
       string_to_array(nullif(dep, ''), ',')::bigint[], df, hd, sk, sd, b, w, ws, po::jsonb
FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::smallint[], $6::timestamptz[], $7::int[], $8::text[], $9::text[],
            $10::text[], $11::text[], $12::bool[], $13::text[], $14::text[], $15::bigint[], $16::bigint[], $17::text[], $18::text[])
     WITH ORDINALITY AS t(i, q, k, p, pr, ra, ma, tg, md, dep, df, hd, sk, sd, b, w, ws, po, n)
ORDER BY n
RETURNING id`

	newBatchSQL = `INSERT INTO fila_batches (callback_kind, callback_queue, callback_payload)
VALUES ($1::text, $2::text, $3::text::jsonb)
RETURNING id`

	sealBatchSQL = `UPDATE fila_batches SET sealed = true WHERE id = $1::bigint AND NOT sealed RETURNING id`

	getBatchSQL = `SELECT id, sealed, total, completed, dead, cancelled, callback_kind, callback_queue, callback_id,
       created_at, finished_at,
       (SELECT count(*) FROM fila_jobs j WHERE j.batch_id = b.id),
       (SELECT count(*) FROM fila_jobs j WHERE j.batch_id = b.id AND j.state IN ('waiting', 'pending', 'running'))
FROM fila_batches b WHERE id = $1::bigint`

	dependencyOutputsSQL = `SELECT d.id, d.kind, d.state, d.output::text, coalesce(d.workflow_step, '')
FROM fila_jobs j
JOIN fila_jobs d ON d.id = ANY (j.depends_on)
WHERE j.id = $1::bigint
ORDER BY d.id`

	// A job's flows as fila jobs show and the dashboard show them: what it
	// waits for, what waits for it, its place in its sequence and its
	// batch. Rows: (relation, id, kind, state).
	jobFlowSQL = `SELECT 'dependency', d.id, d.kind, d.state FROM fila_jobs j JOIN fila_jobs d ON d.id = ANY (j.depends_on) WHERE j.id = $1::bigint
UNION ALL
SELECT 'dependent', x.id, x.kind, x.state FROM fila_jobs x WHERE x.depends_on @> ARRAY[$1::bigint] AND x.id > $1::bigint
UNION ALL
SELECT 'before', p.id, p.kind, p.state FROM fila_jobs j JOIN fila_jobs p ON p.id = j.sequence_prev WHERE j.id = $1::bigint
UNION ALL
SELECT 'after', s.id, s.kind, s.state FROM fila_jobs j JOIN fila_jobs s ON s.sequence_prev = j.id AND s.sequence_key = j.sequence_key
WHERE j.id = $1::bigint
ORDER BY 1, 2`

	jobFlowHeadSQL = `SELECT j.depends_on IS NOT NULL OR j.has_dependents OR j.sequence_key IS NOT NULL OR j.batch_id IS NOT NULL
           OR EXISTS (SELECT 1 FROM fila_batches b WHERE b.callback_id = j.id),
       coalesce(j.dependency_failure, 'dead'), coalesce(j.sequence_key, ''), coalesce(j.sequence_on_dead, 'block'),
       coalesce(j.batch_id, (SELECT b.id FROM fila_batches b WHERE b.callback_id = j.id)),
       CASE WHEN j.state = 'waiting' THEN (fila_flow_check(j)).reason END
FROM fila_jobs j WHERE j.id = $1::bigint`
)

// insertFlowRows writes prepared jobs with flows; ids[i] > 0 gives job i
// its id (InsertWorkflow reserves them).
func insertFlowRows(ctx context.Context, db DB, rows []insertRow, ids []int64) ([]int64, error) {
	n := len(rows)
	queues, kinds, payloads := make([]string, n), make([]string, n), make([]string, n)
	prios, maxes := make([]int16, n), make([]int32, n)
	runAts := make([]*time.Time, n)
	tags, metadata := make([]*string, n), make([]*string, n)
	deps, depFailure, seq, seqDead := make([]string, n), make([]*string, n), make([]*string, n), make([]*string, n)
	hasDeps, batches := make([]bool, n), make([]*int64, n)
	workflows, steps, policies := make([]*int64, n), make([]*string, n), make([]*string, n)
	if ids == nil {
		ids = make([]int64, n)
	}
	for i, r := range rows {
		queues[i], kinds[i], payloads[i], prios[i], runAts[i], maxes[i] = r.queue, r.kind, r.payload, r.priority, r.runAt, r.maxAttempts
		tags[i], metadata[i] = r.tags, r.metadata
		ds := make([]string, len(r.dependsOn))
		for k, d := range r.dependsOn {
			ds[k] = strconv.FormatInt(d, 10)
		}
		deps[i] = strings.Join(ds, ",")
		depFailure[i], hasDeps[i], seq[i], seqDead[i], batches[i] = r.depFailure, r.hasDependents, r.sequence, r.sequenceOnDead, r.batch
		workflows[i], steps[i], policies[i] = r.workflowID, r.workflowStep, r.policy
	}
	res, err := db.Query(ctx, insertFlowSQL, ids, queues, kinds, payloads, prios, runAts, maxes, tags, metadata,
		deps, depFailure, hasDeps, seq, seqDead, batches, workflows, steps, policies)
	if err != nil {
		return nil, fmt.Errorf("insert %d jobs: %w", n, err)
	}
	got, err := scanIDs(res, n)
	if err != nil {
		return nil, fmt.Errorf("insert %d jobs: %w", n, err)
	}
	return got, nil
}

// WorkflowJob is one job of a workflow (InsertWorkflow).
type WorkflowJob struct {
	// Name identifies the job in its workflow, for the After of the others;
	// the job keeps it as its step's name (JobRow.WorkflowStep), by which
	// the jobs after it read its output (DependencyOutputsByStep). Required;
	// unique within the workflow; at most StepNameMax bytes.
	Name string
	// After names the jobs of the workflow that must complete before this
	// one runs. InsertOpts.After may add jobs inserted before, by id.
	After []string
	InsertParams
}

// ErrWorkflow is wrapped by InsertWorkflow's error for a workflow that is
// not a valid graph: a job without a name, a name used twice, a name in
// After that no job has, or a cycle.
var ErrWorkflow = errors.New("invalid workflow")

// StepNameMax bounds a workflow step's name (WorkflowJob.Name), in bytes.
const StepNameMax = 200

// InsertedWorkflow is what InsertWorkflowID inserted.
type InsertedWorkflow struct {
	// ID is the workflow's id, which every one of its jobs carries
	// (JobRow.WorkflowID): the id of its first job, its lowest.
	ID int64 `json:"workflow_id"`
	// JobIDs are the jobs' ids, in the order given.
	JobIDs []int64 `json:"job_ids"`
}

// InsertWorkflow inserts the jobs of a workflow, a graph of dependencies,
// in one statement (so all or none, inside the caller's transaction if db
// is one), and returns their ids in the order given. Each job waits
// (state waiting) until every job it comes After has completed; one that
// ends dead or cancelled makes it dead (or cancelled, or run anyway: see
// InsertOpts.OnDependencyFailure). The graph is checked first: an error
// wrapping ErrWorkflow names the job at fault. Every job carries the
// workflow's id and its step's name; InsertWorkflowID returns the id too.
func InsertWorkflow(ctx context.Context, db DB, jobs []WorkflowJob) ([]int64, error) {
	wf, err := InsertWorkflowID(ctx, db, jobs)
	return wf.JobIDs, err
}

// InsertWorkflowID is InsertWorkflow, returning the workflow's id with
// its jobs' ids: the id that ListWorkflowJobs, CancelWorkflow and
// RetryWorkflow take.
func InsertWorkflowID(ctx context.Context, db DB, jobs []WorkflowJob) (InsertedWorkflow, error) {
	if len(jobs) == 0 {
		return InsertedWorkflow{}, nil
	}
	ids, err := insertWorkflow(ctx, db, jobs)
	if err != nil {
		return InsertedWorkflow{}, err
	}
	return InsertedWorkflow{ID: slices.Min(ids), JobIDs: ids}, nil
}

func insertWorkflow(ctx context.Context, db DB, jobs []WorkflowJob) ([]int64, error) {
	order, err := workflowOrder(jobs)
	if err != nil {
		return nil, fmt.Errorf("insert workflow: %w", err)
	}
	byName := make(map[string]int, len(jobs))
	for i, j := range jobs {
		byName[j.Name] = i
	}
	rows := make([]insertRow, len(jobs))
	for i, j := range jobs {
		r, err := prepareWith(j.InsertParams, true)
		if err != nil {
			return nil, fmt.Errorf("insert workflow: job %q: %w", j.Name, err)
		}
		rows[i] = r
	}
	for _, j := range jobs {
		for _, a := range j.After {
			rows[byName[a]].hasDependents = true
		}
	}
	res, err := db.Query(ctx, reserveIDsSQL, len(jobs))
	if err != nil {
		return nil, fmt.Errorf("insert workflow: reserve ids: %w", err)
	}
	reserved, err := scanIDs(res, len(jobs))
	if err != nil {
		return nil, fmt.Errorf("insert workflow: reserve ids: %w", err)
	}
	// A job's id is above those of the jobs it waits for: ids in
	// topological order. The lowest names the workflow.
	slices.Sort(reserved)
	workflowID := reserved[0]
	ids := make([]int64, len(jobs))
	for k, i := range order {
		ids[i] = reserved[k]
	}
	sorted := make([]insertRow, len(jobs))
	sortedIDs := make([]int64, len(jobs))
	for k, i := range order {
		r := rows[i]
		step := jobs[i].Name
		r.workflowID, r.workflowStep = &workflowID, &step
		for _, a := range jobs[i].After {
			if d := ids[byName[a]]; !slices.Contains(r.dependsOn, d) {
				r.dependsOn = append(r.dependsOn, d)
			}
		}
		if len(r.dependsOn) > DependenciesMax {
			return nil, fmt.Errorf("insert workflow: job %q: %d dependencies, at most %d", jobs[i].Name, len(r.dependsOn), DependenciesMax)
		}
		sorted[k], sortedIDs[k] = r, ids[i]
	}
	if _, err := insertFlowRows(ctx, db, sorted, sortedIDs); err != nil {
		return nil, fmt.Errorf("insert workflow: %w", payloadLimitError(err))
	}
	return ids, nil
}

// workflowOrder checks a workflow's graph and returns its jobs' indexes in
// an order where each comes after those it waits for (the order given,
// where it allows).
func workflowOrder(jobs []WorkflowJob) ([]int, error) {
	byName := make(map[string]int, len(jobs))
	for i, j := range jobs {
		if j.Name == "" {
			return nil, fmt.Errorf("%w: job %d has no Name", ErrWorkflow, i)
		}
		if len(j.Name) > StepNameMax {
			return nil, fmt.Errorf("%w: job %d's Name is %d bytes, at most %d", ErrWorkflow, i, len(j.Name), StepNameMax)
		}
		if k, dup := byName[j.Name]; dup {
			return nil, fmt.Errorf("%w: jobs %d and %d are both named %q", ErrWorkflow, k, i, j.Name)
		}
		byName[j.Name] = i
	}
	for _, j := range jobs {
		for _, a := range j.After {
			if _, ok := byName[a]; !ok {
				return nil, fmt.Errorf("%w: job %q comes after %q, which is not in the workflow", ErrWorkflow, j.Name, a)
			}
			if a == j.Name {
				return nil, fmt.Errorf("%w: job %q comes after itself", ErrWorkflow, j.Name)
			}
		}
	}
	// Depth-first, in the order given; a job met again while its own
	// dependencies are being placed closes a cycle.
	const (
		unseen = iota
		placing
		placed
	)
	mark := make([]int, len(jobs))
	order := make([]int, 0, len(jobs))
	var path []int
	var visit func(i int) error
	visit = func(i int) error {
		switch mark[i] {
		case placed:
			return nil
		case placing:
			start := slices.Index(path, i)
			names := make([]string, 0, len(path)-start+1)
			for _, k := range path[start:] {
				names = append(names, strconv.Quote(jobs[k].Name))
			}
			names = append(names, strconv.Quote(jobs[i].Name))
			return fmt.Errorf("%w: cycle %s", ErrWorkflow, strings.Join(names, " after "))
		}
		mark[i] = placing
		path = append(path, i)
		for _, a := range jobs[i].After {
			if err := visit(byName[a]); err != nil {
				return err
			}
		}
		path = path[:len(path)-1]
		mark[i] = placed
		order = append(order, i)
		return nil
	}
	for i := range jobs {
		if err := visit(i); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// BatchCallback is the job a batch inserts once all its jobs finished.
type BatchCallback struct {
	Kind string
	// Queue defaults to "default".
	Queue string
	// Payload is a JSON object (nil for {}); the callback's payload is it
	// with the batch's counts under "batch": {"id", "total", "completed",
	// "dead", "cancelled"}.
	Payload any
}

// Batch is a batch's progress (GetBatch).
type Batch struct {
	ID     int64 `json:"id"`
	Sealed bool  `json:"sealed"`
	// Total is the number of jobs, fixed when the batch is sealed.
	Total     int `json:"total"`
	Completed int `json:"completed"`
	Dead      int `json:"dead"`
	Cancelled int `json:"cancelled"`
	// Jobs and Unfinished count its jobs now in the table (retention may
	// have deleted finished ones).
	Jobs          int    `json:"jobs"`
	Unfinished    int    `json:"unfinished"`
	CallbackKind  string `json:"callback_kind"`
	CallbackQueue string `json:"callback_queue"`
	// CallbackID is the callback job's id once inserted.
	CallbackID *int64     `json:"callback_id"`
	CreatedAt  time.Time  `json:"created_at"`
	FinishedAt *time.Time `json:"finished_at"`
}

// ErrBatchNotFound is wrapped by GetBatch's and SealBatch's errors when no
// batch has the id.
var ErrBatchNotFound = errors.New("no such batch")

// NewBatch creates an open batch and returns its id. Jobs join it with
// InsertOpts.Batch until SealBatch; the callback is inserted once, when the
// batch is sealed and all its jobs finished. InsertBatch does all three.
func NewBatch(ctx context.Context, db DB, cb BatchCallback) (int64, error) {
	if err := ValidateKind(cb.Kind); err != nil {
		return 0, fmt.Errorf("new batch: callback: %w", err)
	}
	queue := cb.Queue
	if queue == "" {
		queue = "default"
	}
	if err := channel.ValidateQueue(queue); err != nil {
		return 0, fmt.Errorf("new batch: callback: %w", err)
	}
	payload := []byte("{}")
	if cb.Payload != nil {
		b, err := json.Marshal(cb.Payload)
		if err != nil {
			return 0, fmt.Errorf("new batch: callback payload: %w", err)
		}
		if err := storableJSON(b); err != nil {
			return 0, fmt.Errorf("new batch: callback payload %w", err)
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal(b, &obj) != nil || obj == nil {
			return 0, errors.New("new batch: callback payload must be a JSON object")
		}
		payload = b
	}
	var id int64
	if err := db.QueryRow(ctx, newBatchSQL, cb.Kind, queue, string(payload)).Scan(&id); err != nil {
		return 0, fmt.Errorf("new batch: %w", err)
	}
	return id, nil
}

// SealBatch closes a batch: no job joins it any more, its size is the
// jobs that joined, and its callback is inserted now if they all finished
// already (or when the last of them does).
func SealBatch(ctx context.Context, db DB, id int64) error {
	var got int64
	err := db.QueryRow(ctx, sealBatchSQL, id).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		if _, gerr := GetBatch(ctx, db, id); gerr != nil {
			return fmt.Errorf("seal batch %d: %w", id, gerr)
		}
		return fmt.Errorf("seal batch %d: already sealed", id)
	}
	if err != nil {
		return fmt.Errorf("seal batch %d: %w", id, err)
	}
	return nil
}

// InsertBatch creates a batch of jobs with a callback, in one transaction
// (a savepoint of the caller's, if db is one): the batch, its jobs, and its
// seal. It returns the batch's id and the jobs' ids.
func InsertBatch(ctx context.Context, db DB, jobs []InsertParams, cb BatchCallback) (int64, []int64, error) {
	var (
		batch int64
		ids   []int64
	)
	do := func(q DB) error {
		var err error
		if batch, err = NewBatch(ctx, q, cb); err != nil {
			return err
		}
		withBatch := make([]InsertParams, len(jobs))
		for i, j := range jobs {
			j.Batch = batch
			withBatch[i] = j
		}
		if len(withBatch) > 0 {
			if ids, err = InsertMany(ctx, q, withBatch); err != nil {
				return err
			}
		}
		return SealBatch(ctx, q, batch)
	}
	ok, err := transact(ctx, db, do)
	if !ok {
		err = do(db)
	}
	if err != nil {
		return 0, nil, fmt.Errorf("insert batch: %w", err)
	}
	return batch, ids, nil
}

// GetBatch reads a batch's progress.
func GetBatch(ctx context.Context, db DB, id int64) (Batch, error) {
	var b Batch
	err := db.QueryRow(ctx, getBatchSQL, id).Scan(&b.ID, &b.Sealed, &b.Total, &b.Completed, &b.Dead, &b.Cancelled,
		&b.CallbackKind, &b.CallbackQueue, &b.CallbackID, &b.CreatedAt, &b.FinishedAt, &b.Jobs, &b.Unfinished)
	if errors.Is(err, pgx.ErrNoRows) {
		return b, fmt.Errorf("batch %d: %w", id, ErrBatchNotFound)
	}
	if err != nil {
		return b, fmt.Errorf("get batch %d: %w", id, err)
	}
	return b, nil
}

// DependencyOutput is what one dependency of a job left.
type DependencyOutput struct {
	ID    int64  `json:"id"`
	Kind  string `json:"kind"`
	State string `json:"state"`
	// Output is what its handler recorded (Job.SetOutput); nil when none.
	Output json.RawMessage `json:"output"`
	// Step is its step's name in its workflow (WorkflowJob.Name), "" for a
	// job of none.
	Step string `json:"step,omitempty"`
}

// DependencyOutputs returns the outputs of the jobs job waits for
// (InsertOpts.After), by id order: a handler reads what the jobs before
// it produced. A dependency deleted since (by retention) is not listed. A
// step of a workflow reads them by step name with DependencyOutputsByStep,
// or one of them, typed, with StepOutput.
func DependencyOutputs(ctx context.Context, db DB, jobID int64) ([]DependencyOutput, error) {
	rows, err := db.Query(ctx, dependencyOutputsSQL, jobID)
	if err != nil {
		return nil, fmt.Errorf("dependency outputs of job %d: %w", jobID, err)
	}
	defer rows.Close()
	var out []DependencyOutput
	for rows.Next() {
		var (
			d      DependencyOutput
			output *string
		)
		if err := rows.Scan(&d.ID, &d.Kind, &d.State, &output, &d.Step); err != nil {
			return nil, fmt.Errorf("dependency outputs of job %d: %w", jobID, err)
		}
		d.Output = rawOrNil(output)
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("dependency outputs of job %d: %w", jobID, err)
	}
	return out, nil
}

// FlowJob is a job related to another by a flow.
type FlowJob struct {
	ID    int64  `json:"id"`
	Kind  string `json:"kind"`
	State string `json:"state"`
}

// JobFlow is a job's place in its flows, as fila jobs show and the
// dashboard show it.
type JobFlow struct {
	// Any says the job takes part in a flow; the rest is empty otherwise.
	Any bool `json:"-"`
	// WaitReason says what a waiting job waits for.
	WaitReason        string    `json:"wait_reason,omitempty"`
	Dependencies      []FlowJob `json:"dependencies,omitempty"`
	DependencyFailure string    `json:"dependency_failure,omitempty"`
	Dependents        []FlowJob `json:"dependents,omitempty"`
	Sequence          string    `json:"sequence,omitempty"`
	SequenceOnDead    string    `json:"sequence_on_dead,omitempty"`
	// Before and After are the jobs just before and after it in its
	// sequence.
	Before *FlowJob `json:"sequence_before,omitempty"`
	After  *FlowJob `json:"sequence_after,omitempty"`
	// Batch is the batch the job belongs to, or whose callback it is.
	Batch *Batch `json:"batch,omitempty"`
}

// GetJobFlow reads a job's flows: its dependencies and dependents with
// their states (ordered by id), its neighbours in its sequence, its batch.
func GetJobFlow(ctx context.Context, db DB, id int64) (JobFlow, error) {
	var (
		f      JobFlow
		batch  *int64
		reason *string
	)
	err := db.QueryRow(ctx, jobFlowHeadSQL, id).Scan(&f.Any, &f.DependencyFailure, &f.Sequence, &f.SequenceOnDead, &batch, &reason)
	if errors.Is(err, pgx.ErrNoRows) {
		return f, fmt.Errorf("job %d: %w", id, ErrJobNotFound)
	}
	if err != nil {
		return f, fmt.Errorf("job %d flows: %w", id, err)
	}
	if !f.Any {
		return JobFlow{}, nil
	}
	if reason != nil {
		f.WaitReason = *reason
	}
	if f.Sequence == "" {
		f.SequenceOnDead = ""
	}
	rows, err := db.Query(ctx, jobFlowSQL, id)
	if err != nil {
		return f, fmt.Errorf("job %d flows: %w", id, err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			rel string
			j   FlowJob
		)
		if err := rows.Scan(&rel, &j.ID, &j.Kind, &j.State); err != nil {
			return f, fmt.Errorf("job %d flows: %w", id, err)
		}
		switch rel {
		case "dependency":
			f.Dependencies = append(f.Dependencies, j)
		case "dependent":
			f.Dependents = append(f.Dependents, j)
		case "before":
			f.Before = &j
		case "after":
			f.After = &j
		}
	}
	if err := rows.Err(); err != nil {
		return f, fmt.Errorf("job %d flows: %w", id, err)
	}
	if len(f.Dependencies) == 0 {
		f.DependencyFailure = ""
	}
	if batch != nil {
		b, err := GetBatch(ctx, db, *batch)
		if err != nil {
			return f, fmt.Errorf("job %d flows: %w", id, err)
		}
		f.Batch = &b
	}
	return f, nil
}
