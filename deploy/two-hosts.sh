#!/usr/bin/env bash
# Two hosts on one Linux machine, to try docs/scale.md's two-machine recipe before a cluster (run as root).
#
#   deploy/two-hosts.sh up DIR [--name NAME] [--workers N] [--model embedded|none|scripted RULES.json]
#   deploy/two-hosts.sh main DIR COMMAND...            run COMMAND on the main host
#   deploy/two-hosts.sh worker DIR [--host K] [--no-share] COMMAND...   run COMMAND on worker host K (default 1)
#   deploy/two-hosts.sh crash-worker DIR [K]            SIGKILL every process of worker host K (default 1)
#   deploy/two-hosts.sh traffic DIR                     each host's counters: connections, packets, bytes, drops
#   deploy/two-hosts.sh rules main|worker SELF PEERS     print a host's nftables rules (`up` loads them)
#   deploy/two-hosts.sh down DIR                        stop everything `up` started, remove the hosts
#
# `up` makes network namespaces NAME-main (10.77.0.1) and NAME-worker (10.77.0.2; with --workers N also
# NAME-worker2 .. NAME-workerN at 10.77.0.3 ..), each worker joined to the main host's bridge by a veth pair,
# reaching nothing else (no route leaves them), and on the main host's address: Postgres (the Dagster
# instance's storage, database and role `dagster`), redis-server (the Celery broker) and a model server on
# port 8080 (the embedded SmolLM2 by default, the scripted stand-in with --model scripted). DIR holds:
#   DIR/main/     the main host's own disk (its DAGSTER_HOME, the services' logs): the worker host never sees it
#   DIR/worker/   the worker host's own disk (its DAGSTER_HOME); DIR/worker2/ .. for the others
#   DIR/shared/   the share both hosts mount at the same path (NFS on real machines): the project home
#                 (shared/project: assets/, runs/, the endpoints file) and Dagster's step outputs (shared/dagster)
#   DIR/hosts.env what a command on either host needs in its environment (`set -a; . DIR/hosts.env`)
# Every host's DAGSTER_HOME holds deploy/dagster-postgres.yaml as its dagster.yaml: the instance is the Postgres
# on the main host, so no Dagster folder is shared except the step outputs.
# `worker` runs COMMAND in the worker's network namespace and in a private mount namespace in which DIR/main
# and the Postgres data are hidden (an empty tmpfs over each), so it sees only what the recipe shares;
# --no-share hides DIR/shared too: a worker host that lacks the share (`automem worker` then names it).
# `down` stops every process of every host's namespace by PID (SIGTERM, then SIGKILL), then Postgres' data folder
# and the namespaces (the veth pairs and the bridge go with them). `up` calls `down` itself when a step fails.
# The traffic is fenced: before any link, every host gets IPv6 off and an nftables table `automem` (`rules`) that
# accepts loopback and, between the main host's address and the worker hosts' own, only TCP to the main host's
# Postgres (5432), redis (6379) and model (8080), opened from a worker host; it counts each service's connections,
# packets and bytes, and drops and counts the rest (`traffic`; tests/e2e/test_two_hosts.py bounds them). Its time
# is the callers' to bound (the test's round limit); nothing here shapes bandwidth or latency.
set -euo pipefail

MAIN_ADDR=10.77.0.1
MODEL_PORT=8080
SERVICES="postgres:5432 redis:6379 model:$MODEL_PORT"  # the only ports the recipe opens between hosts
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${AUTOMEM_PYTHON:-$REPO/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON="$(command -v python3)"

die() { echo "two-hosts: $*" >&2; exit 2; }
usage() { sed -n '2,10p' "$0" >&2; exit 2; }
host_of() { if [ "$1" -eq 1 ]; then echo worker; else echo "worker$1"; fi; }  # worker host K's name and folder

state() {  # state DIR: the namespaces' name and Postgres' data folder recorded by `up`
  DIR="$(realpath -m "$1")"
  [ -f "$DIR/name" ] || die "$DIR holds no two-host topology (no $DIR/name): run \`$0 up $1\` first"
  NAME="$(cat "$DIR/name")"
  WORKERS="$(cat "$DIR/workers" 2>/dev/null || echo 1)"
  PGDATA="$(cat "$DIR/pgdata" 2>/dev/null || true)"
}

pg_bin() {  # Debian's postgresql puts its programs under /usr/lib/postgresql/<version>/bin, not on PATH
  local found
  found="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)"
  [ -n "$found" ] && [ -x "$found/initdb" ] \
    || die "Postgres is not installed (Debian: apt-get install postgresql); docs/scale.md"
  echo "$found"
}

ruleset() {  # ruleset ROLE SELF PEERS: the nftables rules of one host (ROLE main or worker; PEERS: "{ a, b }")
  # Per service: a counter of the connections opened (a SYN that conntrack sees as new) and one of its packets
  # both ways. What no rule accepts is dropped and counted: `invalid` (conntrack cannot place it: a stray packet
  # of a closed connection), `refused` (a recipe port from another address or out of a connection), `dropped`
  # (everything else: another port, another protocol, IPv6). The main host is connected to (its input opens),
  # a worker host connects (its output opens).
  local role=$1 self=$2 peers=$3 opens svc port ports chain match
  ports="{ $(echo "$SERVICES" | sed 's/[a-z]*://g; s/ /, /g') }"
  if [ "$role" = main ]; then opens=input; else opens=output; peers=$MAIN_ADDR; fi
  echo "table inet automem {"
  for svc in $SERVICES refused invalid dropped; do echo "  counter ${svc%%:*} {}"; done
  for svc in $SERVICES; do echo "  counter ${svc%%:*}_conns {}"; done
  for chain in input output; do
    if [ $chain = input ]; then match="ip saddr $peers ip daddr $self"; else match="ip saddr $self ip daddr $peers"; fi
    echo "  chain $chain {"
    echo "    type filter hook $chain priority 0; policy drop;"
    if [ $chain = input ]; then echo "    iif lo accept"; else echo "    oif lo accept"; fi
    echo "    ct state invalid counter name invalid drop"
    for svc in $SERVICES; do
      port=${svc##*:} svc=${svc%%:*}
      if [ $chain = $opens ]; then
        echo "    $match tcp dport $port tcp flags & (fin|syn|rst|ack) == syn ct state new counter name ${svc}_conns"
        echo "    $match tcp dport $port ct state { new, established } counter name $svc accept"
      else
        echo "    $match tcp sport $port ct state established counter name $svc accept"
      fi
    done
    if [ $chain = $opens ]; then echo "    tcp dport $ports counter name refused drop"
    else echo "    tcp sport $ports counter name refused drop"; fi
    echo "    counter name dropped drop"
    echo "  }"
  done
  echo "}"
}

firewall() {  # firewall HOST ROLE SELF PEERS: before any link, IPv6 off (the recipe is IPv4) and the rules loaded
  [ ! -d /proc/sys/net/ipv6 ] \
    || ip netns exec "$NAME-$1" sysctl -q -w net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
  ruleset "$2" "$3" "$4" | ip netns exec "$NAME-$1" nft -f - \
    || die "nft refused the rules of $1 (printed by: $0 rules $2 $3 '$4')"
}

wait_for() {  # wait_for WHAT SECONDS COMMAND...: until COMMAND succeeds, or fail naming WHAT
  local what=$1 limit=$2; shift 2
  for _ in $(seq $((limit * 5))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  die "$what not ready within $limit s"
}

up() {
  local dir=$1; shift
  local name=automem model=embedded rules="" workers=1
  while [ $# -gt 0 ]; do
    case $1 in
      --name) name=$2; shift 2 ;;
      --workers) workers=$2; shift 2 ;;
      --model) model=$2; shift 2; if [ "$model" = scripted ]; then rules="$(realpath "$1")"; shift; fi ;;
      *) die "up: unknown option $1" ;;
    esac
  done
  [ "$(id -u)" -eq 0 ] || die "up needs root (network namespaces, Postgres run as its own user)"
  [ ${#name} -le 12 ] || die "--name $name: at most 12 characters (the veth names add 3)"
  case $workers in [1-9]) ;; *) die "--workers $workers: 1 to 9 worker hosts" ;; esac
  case $model in embedded|none|scripted) ;; *) die "--model $model: embedded, none or scripted RULES.json" ;; esac
  command -v redis-server >/dev/null || die "redis-server is not installed (Debian: apt-get install redis-server)"
  command -v nft >/dev/null || die "nft is not installed, which fences the hosts' traffic (Debian: apt-get install nftables)"
  id postgres >/dev/null 2>&1 || die "no user postgres (Debian's postgresql package creates it)"
  local bin; bin="$(pg_bin)"
  DIR="$(realpath -m "$dir")"
  [ ! -e "$DIR/name" ] || die "$DIR already holds a topology: \`$0 down $dir\` first"
  mkdir -p "$DIR/main/dagster_home" "$DIR/shared/dagster" "$DIR/shared/project"
  echo "$name" > "$DIR/name"
  echo "$workers" > "$DIR/workers"
  NAME=$name WORKERS=$workers
  trap 'rc=$?; if [ $rc -ne 0 ]; then echo "two-hosts: up failed; taking the hosts down" >&2; down_hosts; fi' EXIT

  local workers_set; workers_set="{ $(for k in $(seq "$WORKERS"); do printf '10.77.0.%s, ' $((k + 1)); done | sed 's/, $//') }"
  ip netns add "$NAME-main"
  firewall main main "$MAIN_ADDR" "$workers_set"
  ip -n "$NAME-main" link set lo up
  # No multicast snooping: the bridge would report its group (IGMP), which is no traffic of the recipe.
  ip -n "$NAME-main" link add "$NAME-br" type bridge mcast_snooping 0
  ip -n "$NAME-main" addr add "$MAIN_ADDR/24" dev "$NAME-br"
  ip -n "$NAME-main" link set "$NAME-br" up
  local k host
  for k in $(seq "$WORKERS"); do
    host="$(host_of "$k")"
    mkdir -p "$DIR/$host/dagster_home"
    ip netns add "$NAME-$host"
    firewall "$host" worker "10.77.0.$((k + 1))" -
    ip -n "$NAME-$host" link set lo up
    ip link add "$NAME-m$k" type veth peer name "$NAME-w$k"
    ip link set "$NAME-m$k" netns "$NAME-main"
    ip link set "$NAME-w$k" netns "$NAME-$host"
    ip -n "$NAME-main" link set "$NAME-m$k" master "$NAME-br" up
    ip -n "$NAME-$host" addr add "10.77.0.$((k + 1))/24" dev "$NAME-w$k"
    ip -n "$NAME-$host" link set "$NAME-w$k" up
  done

  # Postgres refuses to run as root: its data lives in a folder of its own user, outside DIR (whose parents
  # may be closed to other users, as pytest's are).
  PGDATA="$(mktemp -d /tmp/automem-pg.XXXXXX)"
  echo "$PGDATA" > "$DIR/pgdata"
  chown postgres "$PGDATA"
  local password; password="$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  runuser -u postgres -- "$bin/initdb" -D "$PGDATA/data" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
    -E UTF8 >"$DIR/main/initdb.log"
  echo "host dagster dagster $MAIN_ADDR/24 scram-sha-256" >> "$PGDATA/data/pg_hba.conf"
  ip netns exec "$NAME-main" runuser -u postgres -- "$bin/pg_ctl" -D "$PGDATA/data" -l "$PGDATA/postgres.log" -w \
    -o "-c listen_addresses=$MAIN_ADDR -c port=5432 -c unix_socket_directories=$PGDATA" start >/dev/null
  runuser -u postgres -- "$bin/psql" -h "$PGDATA" -q -v ON_ERROR_STOP=1 \
    -c "CREATE ROLE dagster LOGIN PASSWORD '$password'" -c "CREATE DATABASE dagster OWNER dagster"

  # No password: protected mode would refuse the worker host; the private network is the fence (docs/scale.md).
  ip netns exec "$NAME-main" redis-server --bind "$MAIN_ADDR" --port 6379 --protected-mode no --save "" --appendonly no \
    --daemonize yes --dir "$DIR/main" --pidfile "$DIR/main/redis.pid" --logfile "$DIR/main/redis.log"
  wait_for "redis-server" 20 grep -q "Ready to accept connections" "$DIR/main/redis.log"

  local serve=()
  case $model in
    embedded) serve=("$PYTHON" -m automem_dagster.llm.embedded_server --host "$MAIN_ADDR" --port "$MODEL_PORT") ;;
    scripted) serve=("$PYTHON" -m automem_dagster.standins.scripted_server --host "$MAIN_ADDR" --port "$MODEL_PORT"
                     --rules "$rules") ;;
  esac
  if [ ${#serve[@]} -gt 0 ]; then
    # Every descriptor to the log, none left to the caller's pipes: `up` returns when the hosts are up.
    (cd "$REPO" && export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" \
       && exec setsid ip netns exec "$NAME-main" "${serve[@]}") >"$DIR/main/model.log" 2>&1 </dev/null &
    echo $! >"$DIR/main/model.pid"
    wait_for "the model server (log $DIR/main/model.log)" 120 ip netns exec "$NAME-main" "$PYTHON" -c \
      "import urllib.request; urllib.request.urlopen('http://$MAIN_ADDR:$MODEL_PORT/health', timeout=2)"
  fi

  cp -r "$REPO/assets" "$DIR/shared/project/assets"
  for host in main $(for k in $(seq "$WORKERS"); do host_of "$k"; done); do
    cp "$REPO/deploy/dagster-postgres.yaml" "$DIR/$host/dagster_home/dagster.yaml"
  done
  cat > "$DIR/shared/project/endpoints.yaml" <<EOF
# The model server on the main host, reached by the round and by every worker at the main host's address.
game:
  name: game
  base_url: http://$MAIN_ADDR:$MODEL_PORT/v1
  server: llama.cpp
  model: smollm2-135m-instruct
  temperature: 0.7
  top_p: 0.95
  max_tokens: 160
  constrained: gbnf
meta:
  kind: rules
EOF
  cat > "$DIR/hosts.env" <<EOF
AUTOMEM_HOME=$DIR/shared/project
AUTOMEM_SHARED_DAGSTER=$DIR/shared/dagster
AUTOMEM_CELERY_BROKER=redis://$MAIN_ADDR:6379/0
DAGSTER_PG_HOST=$MAIN_ADDR
DAGSTER_PG_PASSWORD=$password
EOF
  trap - EXIT
  echo "two-hosts: $NAME-main ($MAIN_ADDR: Postgres 5432, redis 6379, model $model on $MODEL_PORT) and $WORKERS" \
       "worker host(s) from $NAME-worker (10.77.0.2) are up; DAGSTER_HOME: DIR/<host>/dagster_home, DIR=$DIR"
}

all_hosts() { echo main; for k in $(seq "${WORKERS:-1}"); do host_of "$k"; done; }

kill_host() {  # kill_host HOST SIGNAL: every process of the host's network namespace, by PID
  local pids
  pids="$(ip netns pids "$NAME-$1" 2>/dev/null || true)"
  [ -z "$pids" ] || kill "-$2" $pids 2>/dev/null || true
}

down_hosts() {
  local bin
  if [ -n "${PGDATA:-}" ] && [ -f "$PGDATA/data/postmaster.pid" ]; then
    bin="$(pg_bin)"
    runuser -u postgres -- "$bin/pg_ctl" -D "$PGDATA/data" -m fast -w stop >/dev/null 2>&1 || true
  fi
  for host in $(all_hosts); do kill_host "$host" TERM; done
  for _ in $(seq 50); do
    [ -z "$(for host in $(all_hosts); do ip netns pids "$NAME-$host" 2>/dev/null; done)" ] && break
    sleep 0.2
  done
  for host in $(all_hosts); do kill_host "$host" KILL; done
  for host in $(all_hosts); do ip netns del "$NAME-$host" 2>/dev/null || true; done
  [ -z "${PGDATA:-}" ] || rm -rf "$PGDATA"
  rm -f "$DIR/name" "$DIR/pgdata" "$DIR/workers"
}

traffic() {  # traffic DIR: each host's counters, one line a service or a drop (see ruleset)
  state "$1"
  printf '%-8s %-9s %11s %9s %11s\n' host what connections packets bytes
  for host in $(all_hosts); do
    ip netns exec "$NAME-$host" nft list counters table inet automem | awk -v host="$host" -v services="$SERVICES" '
      $1 == "counter" { name = $2 }
      $1 == "packets" { packets[name] = $2; bytes[name] = $4 }
      END {
        n = split(services, svc, " ")
        for (i = 1; i <= n; i++) { sub(/:.*/, "", svc[i])
          printf "%-8s %-9s %11d %9d %11d\n", host, svc[i], packets[svc[i] "_conns"], packets[svc[i]], bytes[svc[i]] }
        split("refused invalid dropped", drop, " ")
        for (i = 1; i <= 3; i++) printf "%-8s %-9s %11s %9d %11d\n", host, drop[i], "-", packets[drop[i]], bytes[drop[i]]
      }'
  done
}

on_worker() {  # on_worker DIR [--host K] [--no-share] COMMAND...
  state "$1"; shift
  local hide=("$DIR/main") k=1
  [ -z "$PGDATA" ] || hide+=("$PGDATA")
  if [ "${1:-}" = --host ]; then k=$2; shift 2; fi
  [ "$k" -ge 1 ] && [ "$k" -le "$WORKERS" ] || die "--host $k: this topology has worker hosts 1 to $WORKERS"
  if [ "${1:-}" = --no-share ]; then hide+=("$DIR/shared"); shift; fi
  [ $# -gt 0 ] || usage
  # The mounts stay in this private mount namespace; `exec` keeps the PID, so a caller can stop COMMAND by it.
  exec ip netns exec "$NAME-$(host_of "$k")" unshare --mount --propagation private sh -c \
    'n=$1; shift; i=0; while [ $i -lt "$n" ]; do mount -t tmpfs -o size=1m,mode=0755 not-shared "$1"; shift; i=$((i+1)); done; exec "$@"' \
    sh "${#hide[@]}" "${hide[@]}" "$@"
}

[ $# -ge 2 ] || usage
command=$1; shift
case $command in
  up) up "$@" ;;
  down) state "$1"; down_hosts; echo "two-hosts: $NAME is down" ;;
  main) state "$1"; shift; [ $# -gt 0 ] || usage; exec ip netns exec "$NAME-main" "$@" ;;
  worker) on_worker "$@" ;;
  crash-worker) state "$1"; kill_host "$(host_of "${2:-1}")" KILL ;;
  traffic) traffic "$1" ;;
  rules) [ $# -eq 3 ] && case $1 in main|worker) ;; *) false ;; esac || usage; ruleset "$@" ;;
  *) usage ;;
esac
