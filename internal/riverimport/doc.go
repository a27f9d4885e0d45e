// Package riverimport moves River's queued jobs (its table river_job) into
// fila_jobs, for a team switching from River to Fila: `fila import river`
// is its command line.
//
// Jobs move in batches of River ids, read in id order after the last one
// moved (never by OFFSET), each batch in one transaction of the Fila
// database. Every River id moved is recorded in fila_river_imports, in the
// statement that writes its job, and a batch skips the ids recorded there,
// so an import that stopped half way, or runs twice, moves nothing twice —
// even once a moved job has been deleted from fila_jobs. Every imported job
// also carries River's id in its metadata (MetadataKey), for people to
// find it by.
//
// The jobs are written with one INSERT … SELECT FROM unnest(…) per batch
// rather than through runtime.InsertMany: River's attempts, error history,
// creation time and finished states have no place in runtime.InsertOpts.
// Each row is first checked against what runtime's insert path checks
// (kind, queue, tags, metadata, payload limits), so a bad row is named by
// its River id; the table's own triggers (notifications, payload and tag
// limits) run as for any insert.
package riverimport
