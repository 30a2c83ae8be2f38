"""A client process for the crash test: pays once, by operation name, through a journal.

Usage: python journal_client.py JOURNAL_PATH URL. Prints the final status. The test
kills this process mid-operation and runs it again: the journal must make the second
run resume with the first run's key.
"""

from __future__ import annotations

import sys

import retrysafe
from retrysafe.idempotency import Journal


def main() -> None:
    journal_path, url = sys.argv[1], sys.argv[2]
    policy = retrysafe.RetryPolicy(attempt_timeout=20, deadline=30)
    with (
        Journal(journal_path) as journal,
        retrysafe.Client(journal=journal, policy=policy) as client,
    ):
        response = client.post(url, json={"amount": 4900, "currency": "eur"}, operation="pay-42")
        print(response.status_code, flush=True)


if __name__ == "__main__":
    main()
