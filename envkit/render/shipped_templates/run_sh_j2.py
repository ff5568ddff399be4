from jinja2.runtime import LoopContext, Macro, Markup, Namespace, TemplateNotFound, TemplateReference, TemplateRuntimeError, Undefined, escape, identity, internalcode, markup_join, missing, str_join
name = 'run.sh.j2'

def root(context, missing=missing, environment=environment):
    resolve = context.resolve_or_missing
    undefined = environment.undefined
    concat = environment.concat
    cond_expr_undefined = Undefined
    if 0: yield None
    l_0_config_name = resolve('config_name')
    l_0_target = resolve('target')
    l_0_results_folder = resolve('results_folder')
    l_0_kind = resolve('kind')
    l_0_image = resolve('image')
    l_0_ulimits = resolve('ulimits')
    l_0_docker_args = resolve('docker_args')
    l_0_run_env = resolve('run_env')
    try:
        t_1 = environment.filters['sh']
    except KeyError:
        @internalcode
        def t_1(*unused):
            raise TemplateRuntimeError("No filter named 'sh' found.")
    pass
    yield '#!/usr/bin/env bash\n# Rendered by envkit from '
    yield str((undefined(name='config_name') if l_0_config_name is missing else l_0_config_name))
    yield ', target "'
    yield str(environment.getattr((undefined(name='target') if l_0_target is missing else l_0_target), 'name'))
    yield '" ('
    yield str(environment.getattr((undefined(name='target') if l_0_target is missing else l_0_target), 'kind'))
    yield '). Do not edit:\n# change '
    yield str((undefined(name='config_name') if l_0_config_name is missing else l_0_config_name))
    yield " and run `envkit render`.\n#\n# usage: run.sh COMMAND [ARGS...]        e.g. run.sh python train.py, run.sh python recipes/mnist.py --epochs 1\n# Runs COMMAND in the image, from the project's root there, through envkit_run.py (its results file:\n# exit status, wall time, metrics, environment) with ./data and ./"
    yield str((undefined(name='results_folder') if l_0_results_folder is missing else l_0_results_folder))
    yield ' mounted. Nothing is added\n# to its arguments: the locations and the device reach it as ENVKIT_DATA_DIR, ENVKIT_RESULTS_DIR and\n# ENVKIT_DEVICE='
    yield str(environment.getattr((undefined(name='kind') if l_0_kind is missing else l_0_kind), 'device'))
    yield " (the recipes' defaults for --data-dir, --results-dir, --device), and the target\n# as ENVKIT_TARGET="
    yield str(environment.getattr((undefined(name='target') if l_0_target is missing else l_0_target), 'name'))
    yield ' (its results file names it).\n# Environment: IMAGE (default '
    yield str((undefined(name='image') if l_0_image is missing else l_0_image))
    yield '), DATA_DIR (./data), RESULTS_DIR (./'
    yield str((undefined(name='results_folder') if l_0_results_folder is missing else l_0_results_folder))
    yield '),\n'
    yield from context.blocks['usage'][0](context)
    yield '# SHM_SIZE ('
    yield str((environment.getattr((undefined(name='target') if l_0_target is missing else l_0_target), 'shm_size') or "default: share the host's IPC namespace"))
    yield '), DOCKER (docker),\n'
    if environment.getattr(environment.getattr((undefined(name='kind') if l_0_kind is missing else l_0_kind), 'run'), 'ulimits'):
        pass
        yield '# ULIMITS (docker --ulimit settings; default '
        yield str((undefined(name='ulimits') if l_0_ulimits is missing else l_0_ulimits))
        yield '; empty for none),\n'
    yield '# NNODES, NODE_RANK, RDZV_ENDPOINT, RDZV_ID, NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME (multi-node\n# torchrun: passed into the container when set; NNODES above 1 runs on the host network),\n# ENVKIT_EXPERIMENT (the experiment its results file names), ENVKIT_ENV (names of variables passed into the\n# container as they are set here, each of which must be: an experiment\'s env, envkit launch\'s --env),\n# ENVKIT_DRY_RUN=1 (print the docker command instead of running it),\n# ENVKIT_IMAGE_DIGEST (the image\'s manifest digest for the results; found for name@sha256: and buildah\'s images).\nset -euo pipefail\n\nfail() {\n  echo "run.sh: error: $*" >&2\n  exit 2\n}\n\n# shlex.quote\'s rules, so that a dry run prints one line a shell reads back exactly.\nquote() {\n  local single="\'\\"\'\\"\'"\n  if [[ -n $1 && $1 != *[!A-Za-z0-9_@%+=:,./-]* ]]; then\n    printf \'%s\' "$1"\n  else\n    printf "\'%s\'" "${1//\\\'/$single}"\n  fi\n}\n\n# docker -v needs absolute host paths.\nabsolute() {\n  if [[ $1 == /* ]]; then\n    printf \'%s\' "$1"\n  else\n    printf \'%s/%s\' "$PWD" "${1#./}"\n  fi\n}\n\n[[ $# -ge 1 && -n $1 ]] || fail "missing COMMAND; usage: run.sh COMMAND [ARGS...], e.g. run.sh python train.py"\n\nimage=${IMAGE:-'
    yield str((undefined(name='image') if l_0_image is missing else l_0_image))
    yield '}\ndata_dir=$(absolute "${DATA_DIR:-./data}")\nresults_dir=$(absolute "${RESULTS_DIR:-./'
    yield str((undefined(name='results_folder') if l_0_results_folder is missing else l_0_results_folder))
    yield '}")\n# DOCKER may be several words, such as "sudo docker".\nread -r -a docker <<<"${DOCKER:-docker}"\nowner="$(id -u):$(id -g)"\n\n'
    yield from context.blocks['devices'][0](context)
    yield "# DataLoader workers and NCCL need more than Docker's 64 MB /dev/shm; an empty size\n# shares the host's IPC namespace instead.\nshm_size=${SHM_SIZE:-"
    yield str((environment.getattr((undefined(name='target') if l_0_target is missing else l_0_target), 'shm_size') or ''))
    yield '}\nif [[ -z $shm_size ]]; then\n  ipc_args=(--ipc=host)\nelif [[ $shm_size =~ ^[0-9]+[bkmgBKMG]?$ ]]; then\n  ipc_args=(--shm-size "$shm_size")\nelse\n  fail "SHM_SIZE must be a size such as '
    yield str((environment.getattr((undefined(name='target') if l_0_target is missing else l_0_target), 'shm_size') or '8g'))
    yield ' (digits and an optional unit b, k, m, g); got \'$shm_size\'"\nfi\n\n'
    if environment.getattr(environment.getattr((undefined(name='kind') if l_0_kind is missing else l_0_kind), 'run'), 'ulimits'):
        pass
        yield '# '
        yield str((undefined(name='ulimits') if l_0_ulimits is missing else l_0_ulimits))
        yield ' are the defaults for '
        yield str(environment.getattr((undefined(name='kind') if l_0_kind is missing else l_0_kind), 'name'))
        yield '; ULIMITS replaces them.\nread -r -a limits <<<"${ULIMITS-'
        yield str((undefined(name='ulimits') if l_0_ulimits is missing else l_0_ulimits))
        yield '}"\nulimit_args=()\nfor limit in ${limits[@]+"${limits[@]}"}; do\n  [[ $limit =~ ^[a-z]+=-?[0-9]+(:-?[0-9]+)?$ ]] || fail "ULIMITS must be NAME=LIMIT words such as memlock=-1; got \'$limit\'"\n  ulimit_args+=(--ulimit "$limit")\ndone\n\n'
    yield '# Multi-node torchrun (the same command on every host): the rendezvous settings reach the\n# program, and NCCL and gloo need the host network to reach the other hosts.\nmultinode_args=()\nfor name in NNODES NODE_RANK RDZV_ENDPOINT RDZV_ID NCCL_SOCKET_IFNAME GLOO_SOCKET_IFNAME; do\n  [[ -z ${!name:-} ]] || multinode_args+=(-e "$name")\ndone\n# An experiment\'s env (envkit experiment names them): each reaches the command as it is set here.\nenv_args=()\nfor name in ${ENVKIT_ENV:-}; do\n  [[ $name =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || fail "ENVKIT_ENV must be variable names; got \'$name\'"\n  # envkit launch --on hosts prints no --env value: each host exports it, and one it forgot is named here.\n  [[ -n ${!name+set} ]] || fail "ENVKIT_ENV names $name, which is not set here; export it first"\n  env_args+=(-e "$name")\ndone\n[[ ${NNODES:-1} =~ ^[1-9][0-9]*$ ]] || fail "NNODES must be a number of hosts, 1 or more; got \'$NNODES\'"\n'
    if (not environment.getattr(environment.getattr((undefined(name='kind') if l_0_kind is missing else l_0_kind), 'run'), 'host_network')):
        pass
        yield 'if ((${NNODES:-1} > 1)); then\n  multinode_args+=(--net=host)\nfi\n'
    yield '\ncommand=(\n  "${docker[@]}" run --rm --init\n'
    yield from context.blocks['run_comment'][0](context)
    if (environment.getattr(environment.getattr((undefined(name='kind') if l_0_kind is missing else l_0_kind), 'run'), 'user') == 'caller'):
        pass
        yield '  --user "$owner" -e HOME=/tmp\n'
    else:
        pass
        yield '  # Root inside: the recipe hands what it writes to ENVKIT_RESULTS_OWNER.\n'
    yield '  '
    for l_1_arg in (undefined(name='docker_args') if l_0_docker_args is missing else l_0_docker_args):
        _loop_vars = {}
        pass
        yield str(t_1(l_1_arg))
        yield ' '
    l_1_arg = missing
    yield from context.blocks['device_args'][0](context)
    yield '"${ipc_args[@]}"'
    for (l_1_name, l_1_value) in context.call(environment.getattr((undefined(name='run_env') if l_0_run_env is missing else l_0_run_env), 'items')):
        _loop_vars = {}
        pass
        yield ' -e '
        yield str(t_1(str_join((l_1_name, '=', l_1_value, ))))
    l_1_name = l_1_value = missing
    yield '\n'
    if environment.getattr(environment.getattr((undefined(name='kind') if l_0_kind is missing else l_0_kind), 'run'), 'ulimits'):
        pass
        yield '  ${ulimit_args[@]+"${ulimit_args[@]}"}\n'
    yield '  -e "ENVKIT_IMAGE=$image" -e ENVKIT_IMAGE_ID -e ENVKIT_IMAGE_DIGEST -e "ENVKIT_RESULTS_OWNER=$owner" -e ENVKIT_EXPERIMENT -e ENVKIT_METRIC_PATTERNS\n  ${multinode_args[@]+"${multinode_args[@]}"} ${env_args[@]+"${env_args[@]}"}\n  -e ENVKIT_DATA_DIR=/workspace/data -e ENVKIT_RESULTS_DIR=/workspace/results -e ENVKIT_DEVICE='
    yield str(t_1(environment.getattr((undefined(name='kind') if l_0_kind is missing else l_0_kind), 'device')))
    yield '\n  -e ENVKIT_TARGET='
    yield str(t_1(environment.getattr((undefined(name='target') if l_0_target is missing else l_0_target), 'name')))
    yield '\n  -v "$data_dir:/workspace/data" -v "$results_dir:/workspace/results"\n  "$image" python /opt/envkit/envkit_run.py "$@"\n)\n\nif [[ ${ENVKIT_DRY_RUN:-} == 1 ]]; then\n  line=""\n  for word in "${command[@]}"; do\n    line+="${line:+ }$(quote "$word")"\n  done\n  printf \'%s\\n\' "$line"\n  exit 0\nfi\n\n# Created by the caller, not by dockerd as root.\nmkdir -p -- "$data_dir" "$results_dir"\n# The results record the image\'s id: a tag moves to the next build, an id does not.\nif image_id=$("${docker[@]}" image inspect --format \'{{.Id}}\' "$image" 2>/dev/null) && [[ -n $image_id ]]; then\n  export ENVKIT_IMAGE_ID=$image_id\nelse\n  unset ENVKIT_IMAGE_ID\nfi\n# ... and its manifest digest where one is known: the caller\'s (a registry\'s), the one in\n# IMAGE=name@sha256:..., or buildah\'s for an image it built (the engine\'s copy has its ID).\nif [[ -z ${ENVKIT_IMAGE_DIGEST:-} ]]; then\n  if [[ $image == *@sha256:* ]]; then\n    export ENVKIT_IMAGE_DIGEST=${image##*@}\n  elif [[ -n ${ENVKIT_IMAGE_ID:-} ]] && command -v buildah >/dev/null \\\n    && digest=$(buildah inspect --type image --format \'{{.FromImageDigest}}\' "$ENVKIT_IMAGE_ID" 2>/dev/null); then\n    export ENVKIT_IMAGE_DIGEST=$digest\n  fi\nfi\nexec "${command[@]}"\n'

def block_usage(context, missing=missing, environment=environment):
    resolve = context.resolve_or_missing
    undefined = environment.undefined
    concat = environment.concat
    cond_expr_undefined = Undefined
    if 0: yield None
    _block_vars = {}
    pass

def block_devices(context, missing=missing, environment=environment):
    resolve = context.resolve_or_missing
    undefined = environment.undefined
    concat = environment.concat
    cond_expr_undefined = Undefined
    if 0: yield None
    _block_vars = {}
    pass

def block_run_comment(context, missing=missing, environment=environment):
    resolve = context.resolve_or_missing
    undefined = environment.undefined
    concat = environment.concat
    cond_expr_undefined = Undefined
    if 0: yield None
    _block_vars = {}
    pass

def block_device_args(context, missing=missing, environment=environment):
    resolve = context.resolve_or_missing
    undefined = environment.undefined
    concat = environment.concat
    cond_expr_undefined = Undefined
    if 0: yield None
    _block_vars = {}
    pass

blocks = {'usage': block_usage, 'devices': block_devices, 'run_comment': block_run_comment, 'device_args': block_device_args}
debug_info = '4=26&5=32&9=34&11=36&12=38&13=40&14=44&15=46&16=48&17=51&53=54&55=56&60=58&63=60&69=62&72=64&73=67&74=71&97=74&105=78&106=79&111=86&113=101&118=105&119=107&14=110&60=119&105=128&111=137'
# Generated by scripts/generate_validators.py from templates/run.sh.j2: do not edit
