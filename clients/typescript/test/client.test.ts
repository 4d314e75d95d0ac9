// Tests of @twicejobs/client against a real PostgreSQL, a real twice
// worker and the JSON API, which clients/clients_test.go provides through
// TWICE_CLIENT_DSN, TWICE_CLIENT_API and TWICE_CLIENT_TOKEN.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, describe, test } from "node:test";

import pg from "pg";

import {
  APIError,
  ArgsTooLarge,
  HTTPClient,
  InvalidArgs,
  InvalidKey,
  InvalidKind,
  InvalidOpts,
  InvalidQueue,
  SensitiveArgs,
  TwiceError,
  UnknownKind,
  enqueue,
} from "../src/index.js";

const dsn = process.env.TWICE_CLIENT_DSN!;
const apiURL = process.env.TWICE_CLIENT_API!;
const token = process.env.TWICE_CLIENT_TOKEN!;
const KIND = "clients.ping.v1";

const pool = new pg.Pool({ connectionString: dsn, max: 4 });
after(() => pool.end());

async function jobState(id: string | number): Promise<string | undefined> {
  const res = await pool.query("SELECT state FROM twice_jobs WHERE id = $1", [id]);
  return res.rows[0]?.state;
}

async function waitState(id: string | number, want: string, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let state: string | undefined;
  while (Date.now() < deadline) {
    state = await jobState(id);
    if (state === want) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.fail(`job ${id} is ${state} after ${timeoutMs} ms, want ${want}`);
}

describe("enqueue in the application's transaction", () => {
  test("a rollback stores nothing", async () => {
    const c = await pool.connect();
    try {
      await c.query("BEGIN");
      const id = await enqueue(c, KIND, { user_id: 1 });
      await c.query("ROLLBACK");
      assert.equal(await jobState(id), undefined);
    } finally {
      c.release();
    }
  });

  test("a commit is run by the Go worker", async () => {
    const c = await pool.connect();
    let id: string;
    try {
      await c.query("BEGIN");
      id = await enqueue(c, KIND, { user_id: 42 }, { metadata: { source: "typescript" } });
      await c.query("COMMIT");
    } finally {
      c.release();
    }
    await waitState(id, "completed");
  });

  test("refusals are typed, and a savepoint lets the transaction go on", async () => {
    const cases: Array<[string, Record<string, unknown>, Record<string, unknown>, new (...a: never[]) => TwiceError, string]> = [
      ["not a kind", { user_id: 1 }, {}, InvalidKind, "TW001"],
      ["clients.nobody.v1", { user_id: 1 }, {}, UnknownKind, "TW002"],
      [KIND, { user_id: "one" }, {}, InvalidArgs, "TW003"],
      ["clients.forced.v1", { email: "x@example.com" }, { force: true }, SensitiveArgs, "TW004"],
      ["clients.forced.v1", { blob: "x".repeat(3000) }, { force: true }, ArgsTooLarge, "TW005"],
      [KIND, { user_id: 1 }, { delay: -5 }, InvalidOpts, "TW006"],
      [KIND, { user_id: 1 }, { queue: "Not A Queue" }, InvalidQueue, "TW007"],
      [KIND, { user_id: 1 }, { uniqueKey: "k".repeat(600) }, InvalidKey, "TW008"],
    ];
    const c = await pool.connect();
    try {
      await c.query("BEGIN");
      for (const [kind, args, opts, cls, code] of cases) {
        await c.query("SAVEPOINT s");
        await assert.rejects(enqueue(c, kind, args, opts), (e: unknown) => {
          assert.ok(e instanceof cls, `${kind} ${JSON.stringify(args)}: ${String(e)}, want ${cls.name}`);
          assert.equal((e as TwiceError).sqlstate, code);
          return true;
        });
        await c.query("ROLLBACK TO SAVEPOINT s");
      }
      const id = await enqueue(c, KIND, { user_id: 7 });
      await c.query("COMMIT");
      await waitState(id, "completed");
    } finally {
      c.release();
    }
  });

  test("a secret-looking field is refused, named", async () => {
    await assert.rejects(enqueue(pool, "clients.forced.v1", { email: "x" }, { force: true }), (e: unknown) => {
      assert.ok(e instanceof SensitiveArgs);
      assert.match((e as Error).message, /email/);
      return true;
    });
  });

  test("a held unique key returns its holder", async () => {
    const key = "ts-" + randomUUID();
    const first = await enqueue(pool, KIND, { user_id: 3 }, { uniqueKey: key, delay: 3600 });
    const second = await enqueue(pool, KIND, { user_id: 3 }, { uniqueKey: key, delay: 3600 });
    assert.equal(second, first);
  });
});

describe("enqueue over the JSON API", () => {
  const api = new HTTPClient(apiURL, token);

  test("a job is enqueued and runs", async () => {
    const job = await api.enqueue(KIND, { user_id: 5 });
    assert.equal(job.kind, KIND);
    assert.equal(job.duplicate, false);
    await waitState(job.id, "completed");
    assert.equal((await api.job(job.id)).state, "completed");
  });

  test("retries with one Idempotency-Key make one job", async () => {
    const key = "ts-" + randomUUID();
    const results = await Promise.allSettled(Array.from({ length: 5 }, () => api.enqueue(KIND, { user_id: 9 }, { idempotencyKey: key })));
    const ids = new Set<number>();
    for (const r of results) {
      if (r.status === "fulfilled") ids.add(r.value.id);
      else assert.equal((r.reason as APIError).status, 409, String(r.reason)); // the key was in flight
    }
    assert.ok(ids.size <= 1, `jobs ${[...ids]}`);
    const replay = await api.enqueue(KIND, { user_id: 9 }, { idempotencyKey: key });
    if (ids.size === 1) assert.deepEqual([...ids], [replay.id]);
    await assert.rejects(api.enqueue(KIND, { user_id: 10 }, { idempotencyKey: key }), (e: unknown) => {
      assert.equal((e as APIError).status, 422);
      return true;
    });
  });

  test("refusals are problem+json", async () => {
    for (const [kind, args] of [
      ["clients.nobody.v1", { user_id: 1 }],
      [KIND, { password: "x" }],
    ] as const) {
      await assert.rejects(api.enqueue(kind, args), (e: unknown) => {
        assert.ok(e instanceof APIError);
        assert.equal(e.status, 422);
        assert.ok(e.problem.detail);
        return true;
      });
    }
  });

  test("delay and force", async () => {
    const before = Date.now();
    const job = await api.enqueue(KIND, { user_id: 11 }, { delay: 3600 });
    const due = Date.parse(String(job.run_at)) - before;
    assert.ok(due > 3500_000 && due < 3700_000, `run_at ${job.run_at} is ${due} ms away`);
    await assert.rejects(api.enqueue(KIND, { user_id: 11 }, { delay: -1 }), (e: unknown) => {
      assert.equal((e as APIError).status, 400);
      return true;
    });
    await assert.rejects(api.enqueue("clients.http-forced.v1", { n: 1 }), (e: unknown) => {
      assert.equal((e as APIError).status, 422);
      assert.match(String((e as APIError).problem.detail), /clients\.http-forced\.v1/);
      return true;
    });
    const forced = await api.enqueue("clients.http-forced.v1", { n: 1 }, { force: true, delay: 3600 });
    assert.equal(forced.kind, "clients.http-forced.v1");
  });

  test("a wrong token is 401", async () => {
    await assert.rejects(new HTTPClient(apiURL, "x".repeat(40)).enqueue(KIND, { user_id: 1 }), (e: unknown) => {
      assert.equal((e as APIError).status, 401);
      return true;
    });
  });
});
