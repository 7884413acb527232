"""Each lane's test count and summed test time, from the file tests/conftest.py writes when
MS_EXP_LANE_TIMES names it (docs/developing.md#lanes); .ci/run ends with these lines.

    python tools/lane_times.py FILE

A missing or empty file is said in one line, not an error: a run that stopped before its
tests ended must still print the rest of .ci/run's summary."""

import sys
from collections import defaultdict
from pathlib import Path

LANES = ("unit", "e2e", "distributed", "server", "browser")


def summary(text: str) -> list:
    count, seconds = defaultdict(int), defaultdict(float)
    for line in text.splitlines():
        lane, time_s, _ = line.split("\t", 2)
        count[lane] += 1
        seconds[lane] += float(time_s)
    return [
        f"lane {lane}: {count[lane]} tests, {seconds[lane]:.0f} s of test time" for lane in LANES
    ]


def main(argv: list) -> int:
    (name,) = argv
    path = Path(name)
    text = path.read_text() if path.is_file() else ""
    if not text.strip():
        print(f"no test times in {path}: the test run did not finish")
        return 0
    print("\n".join(summary(text)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
