'use strict'
// Tests of peer.js's protocol against a real PostgreSQL (TEST_DATABASE_URL,
// else the local default), one fresh database per test. bench/peers' Go
// tests drive the same process through whole scenarios; these check the
// process on its own: what it answers, and that it fails clearly.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { spawn } = require('node:child_process')
const path = require('node:path')
const readline = require('node:readline')
const { Client } = require('pg')

const admin = process.env.TEST_DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/postgres'

async function withDatabase (fn) {
  const name = 'fila_peers_node_' + Math.random().toString(16).slice(2, 10)
  const c = new Client({ connectionString: admin })
  await c.connect()
  await c.query(`CREATE DATABASE ${name} TEMPLATE template0`)
  const url = new URL(admin)
  url.pathname = '/' + name
  try {
    await fn(url.toString())
  } finally {
    await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
    await c.end()
  }
}

// child runs peer.js and hands out its stdout lines one by one.
function child () {
  const p = spawn(process.execPath, [path.join(__dirname, '..', 'peer.js')], { stdio: ['pipe', 'pipe', 'inherit'] })
  const lines = readline.createInterface({ input: p.stdout })[Symbol.asyncIterator]()
  const exited = new Promise((resolve) => p.on('exit', (code) => resolve(code)))
  return {
    send: (s) => p.stdin.write(s + '\n'),
    next: async () => (await lines.next()).value,
    exited
  }
}

test('an unknown system fails with an error line naming it', async () => {
  const c = child()
  c.send(JSON.stringify({ system: 'sidekiq', dsn: admin }))
  const line = await c.next()
  assert.match(line, /^error .*unknown system "sidekiq"/)
  assert.equal(await c.exited, 1)
})

for (const [system, options, add] of [
  ['graphile-worker', { concurrentJobs: 2, localQueueSize: 4, completeJobBatchDelay: 0 },
    (db, seq) => db.query('SELECT graphile_worker.add_job($1, $2::json)', ['peers_noop', JSON.stringify({ seq })])],
  ['pg-boss', { workers: 2, batchSize: 10, pollingIntervalSeconds: 0.5 },
    (db, seq) => db.query('INSERT INTO pgboss.job (name, data) VALUES ($1, $2::jsonb)', ['peers_noop', JSON.stringify({ seq })])]
]) {
  test(`${system}: backlog, a timed job, graceful stop`, async () => {
    await withDatabase(async (dsn) => {
      const c = child()
      c.send(JSON.stringify({ system, dsn, options }))
      const ready = await c.next()
      assert.match(ready, /^ready \d+$/)
      // The reading is process.hrtime's: the same clock as ours.
      const mono = BigInt(ready.split(' ')[1])
      assert.ok(mono <= process.hrtime.bigint())

      c.send('insert 25')
      assert.equal(await c.next(), 'inserted 25')
      c.send('start')
      assert.equal(await c.next(), 'started')
      let untimed = 0
      while (untimed < 25) {
        const line = await c.next()
        assert.match(line, /^c \d+$/)
        untimed = parseInt(line.slice(2), 10)
      }
      assert.equal(untimed, 25)

      const db = new Client({ connectionString: dsn })
      await db.connect()
      const before = process.hrtime.bigint()
      await add(db, 7)
      await db.end()
      const job = await c.next()
      const [, seq, at] = job.split(' ')
      assert.equal(seq, '7')
      assert.ok(BigInt(at) > before, 'the handler began after the insert committed')

      c.send('stop')
      assert.equal(await c.next(), 'stopped')
      assert.equal(await c.exited, 0)
    })
  })
}
