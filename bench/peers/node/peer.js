'use strict'
// peer.js runs one Node.js job system (graphile-worker or pg-boss) in one
// configuration for bench/peers, which drives it over stdin and stdout. The
// producers, the clock and the checks live in Go: this process only installs
// the system's schema, inserts backlogs with the system's batch API, runs its
// workers and says when each handler began.
//
// Protocol, one line each way:
//   stdin, first line: JSON {"system", "dsn", "options"}
//   stdout: "ready <mono_ns>" once the schema is in place
//   stdin "insert <n>"  → stdout "inserted <n>"  (n jobs with seq -1, batch API)
//   stdin "start"       → stdout "started"       (workers running)
//   stdin "stop"        → stdout "stopped", then exit 0 (graceful stop)
//   stdout "j <seq> <mono_ns>": the handler of the job carrying seq >= 0 began
//   stdout "c <count>": jobs carrying seq < 0 (warm-up, drain) begun so far
//   stdout "error <message>", then exit 1: the system could not go on
//
// mono_ns is process.hrtime.bigint(): CLOCK_MONOTONIC on Linux, the clock Go's
// time.Now() reads its monotonic part from, so bench/peers can put a Node
// handler's start and a Go producer's COMMIT on one clock. The "ready" line
// carries a reading so Go can check that they agree.

const readline = require('node:readline')

const jobName = 'peers_noop'

// Output is gathered and written once per turn of the event loop: a
// handler only reads the clock and appends a line.
let out = []
let flushScheduled = false
let untimed = 0
let untimedSent = 0

function flush () {
  flushScheduled = false
  if (untimed !== untimedSent) {
    out.push(`c ${untimed}\n`)
    untimedSent = untimed
  }
  if (out.length > 0) {
    const s = out.join('')
    out = []
    process.stdout.write(s)
  }
}

function emit (line) {
  out.push(line + '\n')
  if (!flushScheduled) {
    flushScheduled = true
    setImmediate(flush)
  }
}

// began records that the handler of a job carrying seq began at t.
function began (seq, t) {
  if (typeof seq === 'number' && seq >= 0) {
    out.push(`j ${seq} ${t}\n`)
  } else {
    untimed++
  }
  if (!flushScheduled) {
    flushScheduled = true
    setImmediate(flush)
  }
}

function fail (err) {
  flush()
  const msg = String(err && err.stack ? err.stack : err).replace(/\n/g, ' | ')
  process.stdout.write(`error ${msg}\n`, () => process.exit(1))
}

// warn sends a system's own warnings and errors to stderr, where bench/peers
// logs them; stdout carries only the protocol.
function warn (system, what) {
  process.stderr.write(`${system}: ${what}\n`)
}

// graphile makes graphile-worker. Every option left out keeps the library's
// default, so an empty options object is graphile-worker as installed.
function graphile (dsn, o) {
  const { run, runMigrations, makeWorkerUtils, Logger } = require('graphile-worker')
  const logger = new Logger(() => (level, message) => {
    if (level === 'error' || level === 'warning') warn('graphile-worker', `${level}: ${message}`)
  })
  const worker = { connectionString: dsn, logger }
  for (const k of ['concurrentJobs', 'maxPoolSize', 'pollInterval', 'completeJobBatchDelay', 'failJobBatchDelay']) {
    if (o[k] !== undefined) worker[k] = o[k]
  }
  if (o.localQueueSize !== undefined) worker.localQueue = { size: o.localQueueSize }
  const preset = { worker }
  const taskList = {
    [jobName]: async (payload) => {
      const t = process.hrtime.bigint()
      began(payload && payload.seq, t)
    }
  }
  let runner = null
  return {
    async setup () {
      await runMigrations({ preset, logger })
    },
    async insert (n) {
      const utils = await makeWorkerUtils({ preset, logger })
      try {
        for (let done = 0; done < n;) {
          const size = Math.min(5000, n - done)
          const specs = Array.from({ length: size }, () => ({ identifier: jobName, payload: { seq: -1 } }))
          await utils.addJobs(specs)
          done += size
        }
      } finally {
        await utils.release()
      }
    },
    async start () {
      runner = await run({ preset, logger, taskList, noHandleSignals: true })
      runner.promise.catch(fail)
    },
    async stop () {
      if (runner) await runner.stop()
    }
  }
}

// pgBoss makes pg-boss. It has no LISTEN: each work() call adds a worker
// that fetches up to batchSize jobs, runs the handler on them, and waits
// out the rest of its polling interval before fetching again.
function pgBoss (dsn, o) {
  const PgBoss = require('pg-boss')
  const config = { connectionString: dsn }
  if (o.max !== undefined) config.max = o.max
  const boss = new PgBoss(config)
  boss.on('error', (err) => warn('pg-boss', `error: ${err && err.message}`))
  const work = {}
  if (o.batchSize !== undefined) work.batchSize = o.batchSize
  if (o.pollingIntervalSeconds !== undefined) work.pollingIntervalSeconds = o.pollingIntervalSeconds
  const handler = async (jobs) => {
    const t = process.hrtime.bigint()
    for (const job of jobs) began(job.data && job.data.seq, t)
  }
  return {
    async setup () {
      await boss.start()
      await boss.createQueue(jobName)
    },
    async insert (n) {
      for (let done = 0; done < n;) {
        const size = Math.min(5000, n - done)
        await boss.insert(Array.from({ length: size }, () => ({ name: jobName, data: { seq: -1 } })))
        done += size
      }
    },
    async start () {
      for (let i = 0; i < (o.workers || 1); i++) {
        await boss.work(jobName, work, handler)
      }
    },
    async stop () {
      await boss.stop({ graceful: true, wait: true, timeout: 30000 })
    }
  }
}

const systems = { 'graphile-worker': graphile, 'pg-boss': pgBoss }

async function main () {
  const rl = readline.createInterface({ input: process.stdin, terminal: false })
  const lines = rl[Symbol.asyncIterator]()
  const first = await lines.next()
  if (first.done) throw new Error('no configuration on stdin')
  const cfg = JSON.parse(first.value)
  const make = systems[cfg.system]
  if (!make) throw new Error(`unknown system ${JSON.stringify(cfg.system)} (want ${Object.keys(systems).join(', ')})`)
  const sys = make(cfg.dsn, cfg.options || {})
  await sys.setup()
  emit(`ready ${process.hrtime.bigint()}`)
  for (;;) {
    const next = await lines.next()
    if (next.done) {
      // bench/peers went away: stop as it would have asked.
      await sys.stop()
      return
    }
    const [cmd, arg] = next.value.trim().split(/\s+/)
    switch (cmd) {
      case 'insert':
        await sys.insert(parseInt(arg, 10))
        emit(`inserted ${arg}`)
        break
      case 'start':
        await sys.start()
        emit('started')
        break
      case 'stop':
        await sys.stop()
        flush()
        process.stdout.write('stopped\n', () => process.exit(0))
        return
      default:
        throw new Error(`unknown command ${JSON.stringify(next.value)}`)
    }
  }
}

process.on('unhandledRejection', fail)
main().catch(fail)
