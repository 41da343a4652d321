# lakestack: the two commands a newcomer needs are `make demo` and `make test`.
# Both create .venv and install the project on first use (exact versions from requirements.lock);
# later runs reuse it.

PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# A second environment with Synapse's Spark 3.5 for the Azure-path job tests (tests/jobs/azure).
VENV35  := .venv-spark35
STAMP35 := $(VENV35)/.installed-stamp
AZURITE_STAMP := .lakestack/azurite/.installed-stamp
# Spark's JVM jars (Delta, S3A, Kafka), pinned in jars/pom.xml and jars/<line>.sha256, fetched once with Maven.
JARS41 := .lakestack/jars/spark41/.verified
JARS35 := .lakestack/jars/spark35/.verified
# pip and uv are pinned so a fresh clone installs the lockfile the way CI did. uv installs it (parallel downloads,
# a few times faster than pip on a first run); the lock pins the same uv for `make lock`.
PIP_VERSION := 26.3
UV_VERSION := $(shell sed -n 's/^uv==//p' requirements.lock 2>/dev/null)
DEMO_ARGS ?=
# pytest-xdist workers for `make test`: one per core this process may use (nproc), at most 4 (each runs a Spark JVM
# and the emulators, ~2 GB); 0 runs the tests in this process.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ "$$n" -gt 4 ] && n=4; echo $$n)

.DEFAULT_GOAL := help
.PHONY: help demo report-screenshot test test-fast test-e2e test-full test-spark35 azurite jars jars-spark35 lint typecheck format bench lock lock-jars clean java mvn

help:
	@echo "make demo       run the whole pipeline on this machine (embedded emulator, no cloud account)"
	@echo "make test       lint, type-check and run the test suite but its end-to-end runs"
	@echo "make test-fast  the same without the Spark, emulator-process and demo tests (inner loop)"
	@echo "make test-e2e   the end-to-end runs: demos, bench, soak, spark-submit, processes killed mid-batch"
	@echo "make test-spark35  the Azure-path job tests under pyspark 3.5 (Synapse's Spark), in $(VENV35)"
	@echo "make test-full  test, test-e2e and test-spark35: everything CI runs"
	@echo "make bench      run the benchmarks in bench/ (slow; prints medians and ratios)"
	@echo "make report-screenshot  the newest report page (or REPORT=path/report.html) as headless Chromium renders it"
	@echo "make jars       fetch Spark's Delta, S3 and Kafka jars with Maven (pinned; demo and test do it on first use)"
	@echo "make lock       re-resolve requirements.lock from pyproject.toml"
	@echo "make lock-jars  re-record the jars' SHA-256s after changing jars/pom.xml"
	@echo "make clean      remove .venv, reports and caches"

# Java 17+ is what pyspark 4.1 runs on; say which package to install instead of failing deep in Spark.
java:
	@command -v java >/dev/null 2>&1 || { \
	  echo "error: Java 17 or newer is required by Spark (pyspark 4.1) and 'java' was not found on PATH." >&2; \
	  echo "       install it: 'sudo apt-get install openjdk-17-jre-headless' (Debian/Ubuntu)," >&2; \
	  echo "       'brew install openjdk@17' (macOS), then run this command again." >&2; exit 2; }
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	if [ -z "$$v" ] || [ "$$v" -lt 17 ]; then \
	  echo "error: Java 17 or newer is required by Spark (pyspark 4.1); found Java '$$v'." >&2; \
	  echo "       install 'openjdk-17-jre-headless' (Debian/Ubuntu) or 'openjdk@17' (macOS) and put it first on PATH." >&2; exit 2; fi

# Maven fetches the jars Spark runs with here (Delta, S3A, Kafka): say which package to install when it is missing.
mvn:
	@command -v mvn >/dev/null 2>&1 || { \
	  echo "error: Maven ('mvn') is needed once, to fetch Spark's Delta, S3 and Kafka jars from Maven Central, and was not found." >&2; \
	  echo "       install it: 'sudo apt-get install maven' (Debian/Ubuntu) or 'brew install maven' (macOS), then run this command again." >&2; exit 2; }

# Maven is asked only when the jars are missing or their pins changed (jars/fetch.py names a missing mvn too).
$(JARS41): jars/pom.xml jars/spark41.sha256 jars/fetch.py $(STAMP)
	@$(MAKE) --no-print-directory mvn
	$(BIN)/python jars/fetch.py --line spark41 --python $(BIN)/python

$(JARS35): jars/pom.xml jars/spark35.sha256 jars/fetch.py $(STAMP35)
	@$(MAKE) --no-print-directory mvn
	$(VENV35)/bin/python jars/fetch.py --line spark35 --python $(VENV35)/bin/python

jars: $(JARS41)

jars-spark35: $(JARS35)

$(STAMP): pyproject.toml requirements.lock
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found; lakestack needs Python 3.11 (set PYTHON=/path/to/python3.11)." >&2; exit 2; }
	@echo "==> creating $(VENV) and installing lakestack (first run downloads Spark, ~450 MB; later runs reuse it)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "pip==$(PIP_VERSION)" "uv==$(UV_VERSION)"
	$(BIN)/uv pip install --quiet --python $(BIN)/python -r requirements.lock
	$(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps -e .
	@touch $(STAMP)

$(STAMP35): requirements-spark35.lock
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found; lakestack needs Python 3.11 (set PYTHON=/path/to/python3.11)." >&2; exit 2; }
	@echo "==> creating $(VENV35) (pyspark 3.5, as on Synapse) for the Azure-path job tests (first run downloads Spark 3.5, ~320 MB)"
	$(PYTHON) -m venv $(VENV35)
	$(VENV35)/bin/python -m pip install --quiet "pip==$(PIP_VERSION)" "uv==$(UV_VERSION)"
	$(VENV35)/bin/uv pip install --quiet --python $(VENV35)/bin/python -r requirements-spark35.lock
	@touch $(STAMP35)

# Azurite (npm) for the Azure path's storage; `lakestack demo --cloud azure` also installs it on first use.
$(AZURITE_STAMP): $(STAMP) lakestack/emulator/node/package-lock.json
	$(BIN)/python -c "from lakestack.emulator.azurite import ensure_installed; ensure_installed()"

azurite: $(AZURITE_STAMP)

demo: java $(STAMP) $(JARS41) $(AZURITE_STAMP)
	$(BIN)/lakestack demo $(DEMO_ARGS)

# Needs Chromium on PATH (e.g. apt-get install chromium); nothing else does (its test skips without it).
REPORT ?= $(lastword $(sort $(wildcard reports/*/report.html)))
report-screenshot: $(STAMP)
	@test -n "$(REPORT)" || { echo "no report under reports/: run make demo first, or pass REPORT=path/report.html"; exit 2; }
	$(BIN)/python -m lakestack.report_screenshot $(REPORT)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

typecheck: $(STAMP)
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# Every test but the end-to-end runs (marker e2e: a whole command or job in a process of its own, or a process
# killed mid-batch), which take half the suite's time; CI runs them too (test-full).
# Tests run in TEST_WORKERS pytest-xdist processes, each with its own SparkSession and emulators; worksteal
# hands a free worker the slow Spark tests another still has queued.
test: java $(STAMP) $(JARS41) $(AZURITE_STAMP) lint
	$(BIN)/python -m pytest -m "not cloud and not e2e" -n $(TEST_WORKERS) --dist worksteal

test-e2e: java $(STAMP) $(JARS41) $(AZURITE_STAMP)
	$(BIN)/python -m pytest -m "e2e and not cloud"

test-full: test test-e2e test-spark35

# Job code that runs on Synapse must hold on Spark 3.5: no 4.0-only API may slip into the Azure path.
# The project is put on the path rather than installed: the cluster gets jobs/ as files too.
test-spark35: java $(STAMP35) $(JARS35)
	LAKESTACK_EXPECT_SPARK=3.5 PYTHONPATH=$(CURDIR) $(VENV35)/bin/python -m pytest -p no:cacheprovider tests/jobs/azure
	@# The lake conformance suite again, on Synapse's Delta line (3.2.1): both engines, every case but the two on
	@# the S3 emulator (moto is not in this environment; S3 is AWS's path, which runs Spark 4.1).
	LAKESTACK_EXPECT_SPARK=3.5 PYTHONPATH=$(CURDIR) $(VENV35)/bin/python -m pytest -p no:cacheprovider \
	  tests/jobs/lake/test_conformance.py -k "not s3"

test-fast: $(STAMP) $(JARS41) lint
	$(BIN)/python -m pytest -m "not slow and not cloud and not e2e"

bench: java $(STAMP) $(JARS41)
	@for b in bench/bench_*.py; do echo "==> $$b"; $(BIN)/python $$b || exit $$?; done

# Re-resolve the lockfile (every extra, for any platform) after changing dependencies in pyproject.toml.
lock: $(STAMP)
	$(BIN)/uv pip compile pyproject.toml --extra dev --universal --python-version 3.11 \
	  --no-emit-package lakestack -o requirements.lock
	$(BIN)/uv pip compile requirements-spark35.in --universal --python-version 3.11 -o requirements-spark35.lock

# Re-record the jars' SHA-256s (jars/<line>.sha256) from what Maven gives for jars/pom.xml.
lock-jars: $(STAMP) $(STAMP35) mvn
	$(BIN)/python jars/fetch.py --line spark41 --python $(BIN)/python --lock
	$(VENV35)/bin/python jars/fetch.py --line spark35 --python $(VENV35)/bin/python --lock

clean:
	rm -rf $(VENV) $(VENV35) .lakestack/azurite .lakestack/jars reports .pytest_cache .ruff_cache .mypy_cache build *.egg-info
