#!/usr/bin/env bash
# Debian packages of the fast canned SSE server (../shared/peers/start-nginx-sse.sh), used by the
# nginx_sse fixture and the load-generator benchmarks. Idempotent.
set -euo pipefail
need=()
command -v nginx > /dev/null || need+=(nginx-light)
[ -f /usr/lib/nginx/modules/ngx_http_lua_module.so ] || need+=(libnginx-mod-http-lua)
[ -f /usr/lib/x86_64-linux-gnu/lua/5.1/cjson.so ] || need+=(lua-cjson)
if [ ${#need[@]} -gt 0 ]; then
  echo "21-nginx-sse: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" > /dev/null
fi
echo "21-nginx-sse: nginx with lua is ready"
