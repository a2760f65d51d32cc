"""The soak (soak.py) in its short form: a tenth of the bench's requests
over stdio and over HTTP (20k reads each), then twice 10 s of idle. What leaks
grows with the requests: descriptors, threads, sessions, subscriptions,
listen streams, idle instances, cached bytes and metric series stay where the first
10k requests left them, RSS within 10% of it, and the idle server opens no
file (the first 10 s, under strace) and spends no more than 100 ms of CPU
(the next 10 s, unwatched)."""

from soak import run

IDLE_SECONDS = 10


def test_a_tenth_of_the_soak_stays_flat_and_goes_quiet():
    _, report, _ = run(scale=0.1, idle_seconds=IDLE_SECONDS)
    for part in report:
        transport, rows = part["transport"], part["rows"]
        settled, last = rows[1], rows[-1]
        assert settled["requests"] >= 10_000 and last["requests"] >= 20_000, part["table"]
        for name in ["descriptors", "series", "subscriptions", "listen streams", "sessions", "cache bytes"]:
            assert last[name] <= settled[name], f"{transport}: {name} grew\n{part['table']}"
        assert last["threads"] <= settled["threads"] + 2, f"{transport}: threads grew\n{part['table']}"
        assert last["idle instances"] <= settled["idle instances"] + 4, part["table"]
        assert last["RSS MiB"] <= settled["RSS MiB"] * 1.10, f"{transport}: RSS grew\n{part['table']}"
        assert part["idle_files_opened"] == 0, f"{transport}: files opened while idle"
        assert part["idle_cpu_ms"] <= 100, f"{transport}: {part['idle_cpu_ms']} ms of CPU in {IDLE_SECONDS} s idle"
