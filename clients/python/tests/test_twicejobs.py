"""Tests of twicejobs against a real PostgreSQL and a real twice worker.

clients/clients_test.go runs them: it makes a schema with twice's
migrations, starts a Go worker of the kind clients.ping.v1 (published with
one field, user_id) and the JSON API, and passes them in the environment:
TWICE_CLIENT_DSN, TWICE_CLIENT_API, TWICE_CLIENT_TOKEN.
"""

import os
import sys
import threading
import time
import unittest
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import psycopg  # noqa: E402

import twicejobs  # noqa: E402

DSN = os.environ["TWICE_CLIENT_DSN"]
API = os.environ["TWICE_CLIENT_API"]
TOKEN = os.environ["TWICE_CLIENT_TOKEN"]
KIND = "clients.ping.v1"


def job_state(job_id):
    with psycopg.connect(DSN) as conn:
        row = conn.execute("SELECT state FROM twice_jobs WHERE id = %s", (job_id,)).fetchone()
        return row[0] if row else None


def wait_state(job_id, want, timeout=30.0):
    deadline = time.monotonic() + timeout
    state = None
    while time.monotonic() < deadline:
        state = job_state(job_id)
        if state == want:
            return
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} is {state!r} after {timeout}s, want {want!r}")


class EnqueueInTransaction(unittest.TestCase):
    def test_rollback_stores_nothing(self):
        marker = str(uuid.uuid4())
        with psycopg.connect(DSN) as conn:
            job_id = twicejobs.enqueue(conn, KIND, {"user_id": 1}, unique_key=marker)
            self.assertGreater(job_id, 0)
            conn.rollback()
            self.assertIsNone(job_state(job_id))

    def test_commit_is_run_by_the_go_worker(self):
        with psycopg.connect(DSN) as conn:
            with conn.transaction():
                conn.execute("CREATE TEMP TABLE IF NOT EXISTS app_users (id int)")
                conn.execute("INSERT INTO app_users VALUES (42)")
                job_id = twicejobs.enqueue(conn, KIND, {"user_id": 42}, metadata={"source": "python"})
        wait_state(job_id, "completed")

    def test_refusals_are_typed_and_the_transaction_goes_on(self):
        cases = [
            ("not a kind", {"user_id": 1}, {}, twicejobs.InvalidKind),
            ("clients.nobody.v1", {"user_id": 1}, {}, twicejobs.UnknownKind),
            (KIND, {"user_id": "one"}, {}, twicejobs.InvalidArgs),
            (KIND, {"email": "x@example.com"}, {}, twicejobs.InvalidArgs),
            ("clients.forced.v1", {"email": "x@example.com"}, {"force": True}, twicejobs.SensitiveArgs),
            ("clients.forced.v1", {"blob": "x" * 3000}, {"force": True}, twicejobs.ArgsTooLarge),
            (KIND, {"user_id": 1}, {"queue": "Not A Queue"}, twicejobs.InvalidQueue),
            (KIND, {"user_id": 1}, {"unique_key": "k" * 600}, twicejobs.InvalidKey),
            (KIND, {"user_id": 1}, {"delay": -5}, twicejobs.InvalidOpts),
        ]
        with psycopg.connect(DSN) as conn:
            for kind, args, opts, want in cases:
                with self.subTest(kind=kind, args=list(args), opts=list(opts)):
                    with self.assertRaises(want) as caught:
                        with conn.transaction():  # a savepoint: the outer transaction goes on
                            twicejobs.enqueue(conn, kind, args, **opts)
                    self.assertEqual(caught.exception.sqlstate, want.sqlstate)
                    self.assertTrue(str(caught.exception))
            # The transaction is still usable after the caught refusals.
            job_id = twicejobs.enqueue(conn, KIND, {"user_id": 7})
            conn.commit()
        wait_state(job_id, "completed")

    def test_secret_field_is_refused_naming_it(self):
        with psycopg.connect(DSN) as conn:
            with self.assertRaises(twicejobs.SensitiveArgs) as caught:
                twicejobs.enqueue(conn, "clients.forced.v1", {"email": "x"}, force=True)
            self.assertIn("email", str(caught.exception))

    def test_unique_key_returns_the_holder(self):
        key = "unique-" + str(uuid.uuid4())
        with psycopg.connect(DSN) as conn:
            first = twicejobs.enqueue(conn, KIND, {"user_id": 3}, unique_key=key, delay=3600)
            second = twicejobs.enqueue(conn, KIND, {"user_id": 3}, unique_key=key, delay=3600)
            conn.commit()
        self.assertEqual(first, second)


class EnqueueOverHTTP(unittest.TestCase):
    def setUp(self):
        self.client = twicejobs.HTTPClient(API, TOKEN)

    def test_enqueue_runs(self):
        job = self.client.enqueue(KIND, {"user_id": 5})
        self.assertEqual(job["kind"], KIND)
        self.assertFalse(job["duplicate"])
        wait_state(job["id"], "completed")
        self.assertEqual(self.client.job(job["id"])["state"], "completed")

    def test_idempotency_key_retry_is_one_job(self):
        key = "py-" + str(uuid.uuid4())
        results = []

        def post():
            try:
                results.append(self.client.enqueue(KIND, {"user_id": 9}, idempotency_key=key))
            except twicejobs.APIError as e:
                results.append(e)

        threads = [threading.Thread(target=post) for _ in range(5)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ids = {r["id"] for r in results if isinstance(r, dict)}
        # Concurrent first tries may be told the key is in flight (409);
        # none made a second job. A retry now replays the first.
        self.assertLessEqual(len(ids), 1, results)
        for r in results:
            if isinstance(r, twicejobs.APIError):
                self.assertEqual(r.status, 409, r.problem)
        replay = self.client.enqueue(KIND, {"user_id": 9}, idempotency_key=key)
        if ids:
            self.assertEqual({replay["id"]}, ids)
        with self.assertRaises(twicejobs.APIError) as caught:
            self.client.enqueue(KIND, {"user_id": 10}, idempotency_key=key)
        self.assertEqual(caught.exception.status, 422)

    def test_refusals(self):
        for kind, args, status in [
            ("clients.nobody.v1", {"user_id": 1}, 422),
            (KIND, {"password": "x"}, 422),
        ]:
            with self.subTest(kind=kind, args=list(args)):
                with self.assertRaises(twicejobs.APIError) as caught:
                    self.client.enqueue(kind, args)
                self.assertEqual(caught.exception.status, status)
                self.assertTrue(caught.exception.problem.get("detail"))

    def test_delay_and_force(self):
        job = self.client.enqueue(KIND, {"user_id": 11}, delay=3600)
        with psycopg.connect(DSN) as conn:
            due = conn.execute(
                "SELECT run_at BETWEEN now() + interval '3500 seconds' AND now() + interval '3601 seconds'"
                " FROM twice_jobs WHERE id = %s",
                (job["id"],),
            ).fetchone()[0]
        self.assertTrue(due, job)
        with self.assertRaises(twicejobs.APIError) as caught:
            self.client.enqueue(KIND, {"user_id": 11}, delay=-1)
        self.assertEqual(caught.exception.status, 400)
        with self.assertRaises(twicejobs.APIError) as caught:
            self.client.enqueue("clients.http-forced.v1", {"n": 1})
        self.assertEqual(caught.exception.status, 422)
        self.assertIn("clients.http-forced.v1", caught.exception.problem["detail"])
        forced = self.client.enqueue("clients.http-forced.v1", {"n": 1}, force=True, delay=3600)
        self.assertEqual(forced["kind"], "clients.http-forced.v1")

    def test_wrong_token(self):
        with self.assertRaises(twicejobs.APIError) as caught:
            twicejobs.HTTPClient(API, "x" * 40).enqueue(KIND, {"user_id": 1})
        self.assertEqual(caught.exception.status, 401)


if __name__ == "__main__":
    unittest.main()
