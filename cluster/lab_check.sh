# The `check` and `scale` commands of cluster/local_lab.sh (sourced by it, not run alone).
#
# check: the README's steps on the lab hosts with Ray's own launcher. The
# secrets folder as cluster/README.md makes it; a copy of cluster/config.yaml
# with only the addresses, user and key changed; `ray up`; a simulator run that
# measures on every worker; a run on a real OpenVINO pair (CPU,CPU_F32); a
# sweep; a run that loses a worker host mid-run; `ray down`; nothing left.

LOGS=${LAB}-logs                 # kept after down: what the launcher and the runs printed
DELAY=0.25                       # seconds per simulated measurement, as docs/results/scale.md
FAILED=""

fail() { FAILED="${FAILED:+$FAILED; }$1"; say "FAILED: $1"; }

ray_cli() {  # ray CLI on the lab copy of the config, from the project folder, the lab launcher's home
    (cd "$ROOT" && HOME=$LAUNCHER_HOME "$RAYBIN/ray" "$@")
}

on_head() {  # $1: seconds, $2: command (run by `ray exec` in the head's project folder)
    timeout "$1" bash -c 'cd "$0" && HOME=$1 "$2/ray" exec "$3" "cd ~/hsdag_ray && $4"' \
        "$ROOT" "$LAUNCHER_HOME" "$RAYBIN" "$CONFIG" "$2"
}

head_file() { cat "$LAB/hosts/head/home/$1" 2>/dev/null; }

make_secrets() {  # as cluster/README.md, section 1, in the launcher's own home
    mkdir -p "$LAUNCHER_HOME/.hsdag_secrets" && chmod 700 "$LAUNCHER_HOME/.hsdag_secrets"
    HOME=$LAUNCHER_HOME RAY_AUTH_MODE=token "$RAYBIN/ray" get-auth-token --generate >/dev/null 2>&1
    cp "$LAUNCHER_HOME/.ray/auth_token" "$LAUNCHER_HOME/.hsdag_secrets/ray_auth_token"
    chmod 600 "$LAUNCHER_HOME/.hsdag_secrets/"*
}

write_config() {
    "$PY" "$ROOT/cluster/lab_config.py" "$ROOT/cluster/config.yaml" "$CONFIG" --head "${IP[head]}" \
        --workers "${IP[w1]},${IP[w2]},${IP[w3]}" --user "$LAB_USER" --key "$KEY"
}

cluster_up() {  # ray up, then wait until the head's autoscaler has started every worker
    make_secrets
    write_config
    say "ray up (log: $LOGS/ray_up.log)"
    if ! timeout 600 bash -c 'cd "$0" && HOME=$1 "$2/ray" up -y --no-config-cache "$3"' \
            "$ROOT" "$LAUNCHER_HOME" "$RAYBIN" "$CONFIG" > "$LOGS/ray_up.log" 2>&1; then
        tail -30 "$LOGS/ray_up.log" >&2
        fail "ray up failed"
        return 1
    fi
    local slots
    for _ in $(seq 60); do
        slots=$(on_head 60 "python3 -c \"import ray; ray.init(address='auto', logging_level='ERROR'); print('SLOTS', sum(n['Resources'].get('measure_slot', 0) for n in ray.nodes() if n['Alive']))\"" 2>/dev/null \
                | sed -n 's/^SLOTS \([0-9.]*\).*/\1/p')
        [[ ${slots%.*} == 3 ]] && break
        sleep 5
    done
    [[ ${slots%.*} == 3 ]] || { fail "the workers did not join (measure_slot: ${slots:-none})"; return 1; }
    say "ray up: head and 3 measuring workers joined"
}

SIM_YAML='printf "sim_delay_s: '$DELAY'\n" > ~/lab_sim.yaml'

summary_check() {  # $1: run name, $2: what; every worker measured (and more checks by $3, python)
    local f=$LAB/hosts/head/home/lab_runs/$1/summary.json
    [[ -f $f ]] || { fail "$2: no summary"; return 1; }
    "$PY" - "$f" "${IP[w1]},${IP[w2]},${IP[w3]}" "${3:-True}" "$LOGS/why" <<'PYEOF' || { fail "$2: $(cat "$LOGS/why")"; return 1; }
import json, sys
s = json.load(open(sys.argv[1]))
workers = sys.argv[2].split(",")
by = s.get("measured_by") or {}
why = None
if sorted(by) != sorted(workers) or min(by.values()) < 1:
    why = f"measurements per machine {by}, expected every one of {workers}"
elif not eval(sys.argv[3], {"s": s}):
    why = f"{sys.argv[3]} does not hold ({ {k: s.get(k) for k in ('machines_left', 'failures', 'measurements', 'backend')} })"
open(sys.argv[4], "w").write(why or "")
print(f"  measurements per machine: {by}" + (f"; left: {s['machines_left']}" if s.get("machines_left") else ""))
sys.exit(1 if why else 0)
PYEOF
}

run_openvino() {
    say "train: OpenVINO pair CPU,CPU_F32 (log: $LOGS/openvino.log)"
    on_head 400 "python3 -m hsdag_ray.train --address auto --backend auto --devices CPU,CPU_F32 --model tiny_cnn \
        --budget 20 --env-runners 3 --wandb disabled --out ~/lab_runs --name openvino" \
        > "$LOGS/openvino.log" 2>&1 || { tail -20 "$LOGS/openvino.log" >&2; fail "the OpenVINO run failed"; return 1; }
    summary_check openvino "the OpenVINO run" 's["failures"] == 0 and not s["backend"].startswith("simulator")'
}

run_sweep() {
    say "sweep: 2 methods, 3 EnvRunners each (log: $LOGS/sweep.log)"
    on_head 500 "printf 'models: [tiny_cnn]\nmethods: [hsdag, random]\nseeds: [0]\nbudget: 20\ntrain: {devices: [CPU, CPU_F32], sim_delay_s: $DELAY, env_runners: 3}\n' > ~/lab_sweep.yaml \
        && python3 -m hsdag_ray.sweep --config ~/lab_sweep.yaml --address auto --wandb disabled --out ~/lab_runs --name sweep" \
        > "$LOGS/sweep.log" 2>&1 || { tail -20 "$LOGS/sweep.log" >&2; fail "the sweep failed"; return 1; }
    local table=$LAB/hosts/head/home/lab_runs/sweep/results.md line
    line=$(grep "^Measurements per machine" "$table" 2>/dev/null || true)
    echo "  $line" >&2
    for w in w1 w2 w3; do
        [[ $line == *"${IP[$w]} "* ]] || { fail "the sweep table names no measurements on $w (${IP[$w]})"; return 1; }
    done
}

kill_worker_ray() {  # $1: host; its Ray processes only (its sshd stays: the machine is still there)
    local n; n=$(ns "$1")
    ip netns pids "$n" | while read -r pid; do
        case "$(cat "/proc/$pid/comm" 2>/dev/null)" in sshd|unshare|"") ;; *) kill -9 "$pid" 2>/dev/null || true ;; esac
    done
}

run_kill() {
    say "train: simulator, ${DELAY} s per measurement, 3 EnvRunners; a worker host's Ray killed mid-run (log: $LOGS/kill.log)"
    on_head 500 "$SIM_YAML && python3 -m hsdag_ray.train --config ~/lab_sim.yaml --address auto --backend simulator \
        --devices CPU,CPU_F32 --model tiny_cnn --budget 100 --env-runners 3 --wandb disabled --out ~/lab_runs --name kill" \
        > "$LOGS/kill.log" 2>&1 &
    local job=$! metrics=$LAB/hosts/head/home/lab_runs/kill/metrics.jsonl
    for _ in $(seq 300); do
        [[ -s $metrics ]] && break
        kill -0 "$job" 2>/dev/null || break
        sleep 1
    done
    if [[ -s $metrics ]]; then
        say "  killing the Ray processes of w3 (${IP[w3]}) after iteration $(wc -l < "$metrics")"
        kill_worker_ray w3
    else
        fail "the run ended or stalled before its first iteration"
    fi
    wait "$job" || { tail -20 "$LOGS/kill.log" >&2; fail "the run that lost a worker failed"; return 1; }
    grep -q "${IP[w3]} left the cluster" "$LOGS/kill.log" || { fail "the run did not say ${IP[w3]} left"; return 1; }
    summary_check kill "the run that lost a worker" "s.get('machines_left') == ['${IP[w3]}']"
}

cluster_down() {
    say "ray down"
    timeout 300 bash -c 'cd "$0" && HOME=$1 "$2/ray" down -y "$3"' "$ROOT" "$LAUNCHER_HOME" "$RAYBIN" "$CONFIG" \
        > "$LOGS/ray_down.log" 2>&1 || { tail -20 "$LOGS/ray_down.log" >&2; fail "ray down failed"; }
    # provider local: `ray down` stops the head only (see cluster/README.md)
    (cd "$ROOT" && PATH=$RAYBIN:$PATH HOME=$LAUNCHER_HOME bash cluster/stop_workers.sh "$CONFIG") >> "$LOGS/ray_down.log" 2>&1 \
        || fail "stopping the workers' Ray failed"
    local h pid left
    for _ in $(seq 15); do  # the head's SSH connections to the workers close within 10 s
        left=""
        for h in "${HOSTS[@]}"; do
            for pid in $(ip netns pids "$(ns "$h")"); do
                case "$(cat "/proc/$pid/comm" 2>/dev/null)" in sshd|unshare|"") ;; *) left+=" $h:$(cat "/proc/$pid/comm" 2>/dev/null)" ;; esac
            done
        done
        [[ -z $left ]] && break
        sleep 2
    done
    [[ -z $left ]] || fail "processes left after ray down:$left"
}

cmd_check() {
    need_root
    local t0=$SECONDS
    [[ -e $LAB/namespaces ]] || cmd_up
    mkdir -p "$LOGS"
    local why=""
    why=$(check_python) || fail "$why"
    if [[ -z $FAILED ]] && cluster_up; then
        run_openvino || true
        run_sweep || true
        run_kill || true
        # the secrets stay out of what the launcher and the runs print
        if grep -rqF "$(cat "$LAUNCHER_HOME/.hsdag_secrets/ray_auth_token")" "$LOGS"; then
            fail "the Ray token appears in the logs"
        fi
    fi
    [[ -z $why ]] && cluster_down  # nothing was launched when the hosts cannot run the Python
    local took=$((SECONDS - t0))
    cmd_down
    ip netns list | grep -q hsdaglab && fail "a lab namespace is left"
    ip link show "$BRIDGE" >/dev/null 2>&1 && fail "the lab bridge is left"
    if [[ -z $FAILED ]]; then
        echo "LAB CHECK PASSED: ray up on cluster/config.yaml (addresses, user and key aside); all 3 workers measured a simulator run that lost one of them (and said so), an OpenVINO CPU,CPU_F32 run and a sweep; ray down and stop_workers.sh left nothing (${took} s)"
    else
        echo "LAB CHECK FAILED: $FAILED (${took} s)"
        return 1
    fi
}

# scale: measurements per second on 1, 2 and 3 worker hosts, as bench/bench_scaling.py
# measures raylets of one machine: ResNet-50 on the simulator with 0.25 s per
# measurement, one EnvRunner per worker and one episode per EnvRunner per iteration;
# the rate is the median over the iterations after the first of an iteration's new
# measurements over its wall time. k workers: a run with k EnvRunners on the cluster
# of three (one per machine).
SCALE_ITERATIONS=${SCALE_ITERATIONS:-5}

cmd_scale() {
    need_root
    [[ -e $LAB/namespaces ]] || cmd_up
    mkdir -p "$LOGS"
    local k rows=""
    local why=""
    why=$(check_python) || fail "$why"
    if [[ -z $FAILED ]] && cluster_up; then
        for k in 1 2 3; do
            say "scale: $k worker(s) (log: $LOGS/scale$k.log)"
            on_head 900 "printf 'sim_delay_s: $DELAY\nepisode_len: 10\nepisodes_per_iteration: $k\nremeasure_rounds: 1\ncheckpoint_every: 1000\n' > ~/lab_scale.yaml \
                && python3 -m hsdag_ray.train --config ~/lab_scale.yaml --address auto --backend simulator --devices CPU,CPU_F32 \
                --model resnet50 --budget $((k * 10 * SCALE_ITERATIONS)) --env-runners $k --wandb disabled --out ~/lab_runs --name scale$k" \
                > "$LOGS/scale$k.log" 2>&1 || { fail "the run on $k worker(s) failed"; continue; }
            rows+=$("$PY" - "$LAB/hosts/head/home/lab_runs/scale$k" "$k" "$DELAY" <<'PYEOF'
import json, statistics, sys
d, k, delay = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
rows = [json.loads(x) for x in open(f"{d}/metrics.jsonl")]
rate = statistics.median(r["measurements_per_s"] for r in rows[1:])
by = json.load(open(f"{d}/summary.json")).get("measured_by", {})
print(f"{k} {rate:.2f} {rate * delay / k:.2f} {len(rows)} {' '.join(f'{m}={n}' for m, n in by.items())}")
PYEOF
)$'\n'
        done
    fi
    [[ -z $why ]] && cluster_down
    cmd_down
    printf '%s' "$rows" | "$PY" -c '
import sys
rows = [l.split(None, 4) for l in sys.stdin if l.strip()]
base = float(rows[0][1]) if rows and rows[0][0] == "1" else None
print("| worker hosts | measurements/s | of ideal | scaling efficiency | iterations | measurements per machine |")
print("|---|---|---|---|---|---|")
for k, rate, ideal, its, *by in rows:
    eff = f"{float(rate) / (int(k) * base):.2f}" if base else "-"
    machines = by[0].strip() if by else "-"
    print(f"| {k} | {rate} | {ideal} | {eff} | {its} | {machines} |")'
    [[ -z $FAILED ]] || { echo "LAB SCALE FAILED: $FAILED"; return 1; }
}
