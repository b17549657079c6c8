#!/usr/bin/env bash
# label: integration nosan
# ngx_http_resil_module in Debian's nginx: tests/nginx_test.py, case "pending"
# (what it shows is said there). Skipped (77) without nginx or the module.
exec python3 "$SRC/tests/nginx_test.py" pending
