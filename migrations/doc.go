// Package migrations holds Fila's versioned SQL, embedded in the binary, and
// applies it once under a transaction-scoped advisory lock, so any number of
// processes may run Migrate at the same time.
//
// # Today's schema in one file
//
// The numbered migrations are history: one that changes a function creates
// it again whole, so today's claim is in whichever migration touched it
// last. schema.sql, beside them, is the schema Migrate builds — tables with
// their columns, constraints and indexes, functions with their full bodies
// and settings, triggers — generated from a freshly migrated database. Read
// it for the SQL that runs today; a change to a migration shows there as a
// diff in review.
//
// TestSchemaFile migrates a fresh database and fails when what it built
// differs from schema.sql, or from the list below; after changing or adding
// a migration, regenerate both with
//
//	go test ./migrations -run TestSchemaFile -update
//
// The test runs on the PostgreSQL major that CI runs, named in the file's
// header: each major prints the same definitions a little differently.
//
// # What touched each object
//
// Each object of schema.sql, with the migrations whose up scripts create,
// alter or drop it by name, oldest first. A table's columns, constraints and
// primary key count as the table. Migrate itself creates fila_migrations.
//
//	fila_batches                     table     0023
//	  fila_batches_seal              trigger   0023
//	fila_jobs                        table     0001 0002 0003 0005 0009 0013 0016 0019 0020 0023 0027 0028 0030
//	  fila_jobs_batch_idx            index     0023
//	  fila_jobs_cancelled_idx        index     0002
//	  fila_jobs_concurrency_idx      index     0003
//	  fila_jobs_dead_idx             index     0002
//	  fila_jobs_depends_idx          index     0023
//	  fila_jobs_finished_idx         index     0001
//	  fila_jobs_held_idx             index     0028
//	  fila_jobs_lease_idx            index     0001
//	  fila_jobs_metadata_idx         index     0019
//	  fila_jobs_pending_idx          index     0001
//	  fila_jobs_scheduled_idx        index     0001 0002 0007
//	  fila_jobs_sequence_idx         index     0023
//	  fila_jobs_tags_idx             index     0019
//	  fila_jobs_unique_idx           index     0003
//	  fila_jobs_waiting_idx          index     0023
//	  fila_jobs_workflow_idx         index     0027
//	  fila_jobs_flow_deleted         trigger   0023
//	  fila_jobs_flow_finished        trigger   0023
//	  fila_jobs_flow_insert          trigger   0023
//	  fila_jobs_notify               trigger   0001
//	  fila_jobs_notify_update        trigger   0002 0003 0014
//	  fila_jobs_payload_limits       trigger   0017
//	  fila_jobs_tags_metadata_valid  trigger   0019
//	fila_kinds                       table     0001 0002
//	fila_migrations                  table     Migrate
//	fila_minutes                     table     0004
//	fila_queues                      table     0003
//	  fila_queues_notify_resume      trigger   0003
//	fila_rate_starts                 table     0022
//	  fila_rate_starts_key_idx       index     0022
//	  fila_rate_starts_until_idx     index     0022
//	fila_recurring                   table     0003
//	fila_river_imports               table     0029
//	fila_sequences                   table     0023
//	fila_sleepers                    table     0005
//	fila_workers                     table     0002 0015 0020
//	fila_append_error                function  0002 0018
//	fila_batch_callback              function  0023
//	fila_batch_count                 function  0023
//	fila_claim                       function  0002 0003 0006 0010 0011 0013 0014 0019 0020 0021 0022 0030
//	fila_claim_id                    function  0012 0013 0014 0019 0020 0030
//	fila_complete                    function  0024 0025
//	fila_finish                      function  0002 0006 0008 0013 0014 0016
//	fila_flow_advance                function  0023
//	fila_flow_check                  function  0023
//	fila_heartbeat                   function  0002 0006 0008 0013
//	fila_job_policy                  function  0030
//	fila_payload_limits              function  0017
//	fila_release                     function  0002 0006 0008 0013 0014
//	fila_rescue_counts               function  0013
//	fila_rescue_reason               function  0013
//	fila_set_payload_limits          function  0017
//	fila_sleep                       function  0005 0006
//	fila_unique_holder               function  0014
//	fila_unique_note                 function  0014
//	fila_wake_held                   function  0026 0031
//	fila_wake_queue                  function  0026 0031
//	fila_worker_live                 function  0020
//	fila_worker_seen                 function  0020
//	fila_workflow_retry              function  0027
//	fila_batch_seal                  function  0023
//	fila_flow_finished               function  0023
//	fila_flow_insert                 function  0023 0026 0031
//	fila_notify_insert               function  0001 0002 0005 0031
//	fila_notify_update               function  0002 0003 0026 0031
//	fila_payload_check               function  0017
//	fila_tags_metadata_check         function  0019
//	fila_notify_resume               function  0003 0031
package migrations
