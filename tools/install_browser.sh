#!/usr/bin/env bash
# A headless browser for the browser tests (tests/test_annotate.py, tests/test_explorer.py): Debian's chromium and
# its driver, since no browser build can be downloaded here. Called by run_tests.sh only (./run_all.sh needs no
# browser). Installed only when missing, as root, where apt-get exists; elsewhere the browser tests skip and say why.
# Never fails: a failed install leaves the browser tests skipping.
if { command -v chromium && command -v chromedriver; } >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "install_browser: installing chromium and chromium-driver (apt-get, for the browser tests)" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; } \
    || echo "install_browser: could not install chromium; the browser tests will skip" >&2
else
  echo "install_browser: no chromium/chromedriver (install them as root: apt-get install chromium chromium-driver);" \
    "the browser tests will skip" >&2
fi
exit 0
