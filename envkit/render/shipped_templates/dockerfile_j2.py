from jinja2.runtime import LoopContext, Macro, Markup, Namespace, TemplateNotFound, TemplateReference, TemplateRuntimeError, Undefined, escape, identity, internalcode, markup_join, missing, str_join
name = 'Dockerfile.j2'

def root(context, missing=missing, environment=environment):
    resolve = context.resolve_or_missing
    undefined = environment.undefined
    concat = environment.concat
    cond_expr_undefined = Undefined
    if 0: yield None
    l_0_apt_snapshot = resolve('apt_snapshot')
    l_0_config_name = resolve('config_name')
    l_0_target = resolve('target')
    l_0_lock = resolve('lock')
    l_0_lock_file = resolve('lock_file')
    l_0_base_image = resolve('base_image')
    l_0_base_digest = resolve('base_digest')
    l_0_apt_leftovers = resolve('apt_leftovers')
    l_0_libpython = resolve('libpython')
    l_0_user = resolve('user')
    l_0_torch_find_links = resolve('torch_find_links')
    l_0_requirements = resolve('requirements')
    l_0_wrapper_files = resolve('wrapper_files')
    l_0_base_digest_label = resolve('base_digest_label')
    l_0_labels = resolve('labels')
    l_0_apt_install_flags = missing
    try:
        t_1 = environment.filters['capitalize']
    except KeyError:
        @internalcode
        def t_1(*unused):
            raise TemplateRuntimeError("No filter named 'capitalize' found.")
    try:
        t_2 = environment.filters['dq']
    except KeyError:
        @internalcode
        def t_2(*unused):
            raise TemplateRuntimeError("No filter named 'dq' found.")
    try:
        t_3 = environment.filters['join']
    except KeyError:
        @internalcode
        def t_3(*unused):
            raise TemplateRuntimeError("No filter named 'join' found.")
    try:
        t_4 = environment.filters['length']
    except KeyError:
        @internalcode
        def t_4(*unused):
            raise TemplateRuntimeError("No filter named 'length' found.")
    try:
        t_5 = environment.filters['list']
    except KeyError:
        @internalcode
        def t_5(*unused):
            raise TemplateRuntimeError("No filter named 'list' found.")
    try:
        t_6 = environment.filters['sh']
    except KeyError:
        @internalcode
        def t_6(*unused):
            raise TemplateRuntimeError("No filter named 'sh' found.")
    pass
    l_0_apt_install_flags = (str_join(('--snapshot ', environment.getattr((undefined(name='apt_snapshot') if l_0_apt_snapshot is missing else l_0_apt_snapshot), 'timestamp'), ' ', )) if ((undefined(name='apt_snapshot') if l_0_apt_snapshot is missing else l_0_apt_snapshot) and (environment.getattr((undefined(name='apt_snapshot') if l_0_apt_snapshot is missing else l_0_apt_snapshot), 'distro') == 'ubuntu')) else '')
    context.vars['apt_install_flags'] = l_0_apt_install_flags
    context.exported_vars.add('apt_install_flags')
    yield '# Rendered by envkit from '
    yield str((undefined(name='config_name') if l_0_config_name is missing else l_0_config_name))
    yield ', target "'
    yield str(environment.getattr((undefined(name='target') if l_0_target is missing else l_0_target), 'name'))
    yield '" ('
    yield str(environment.getattr((undefined(name='target') if l_0_target is missing else l_0_target), 'kind'))
    yield ', torch '
    yield str(environment.getattr((undefined(name='target') if l_0_target is missing else l_0_target), 'torch'))
    yield ').\n# Do not edit: change '
    yield str((undefined(name='config_name') if l_0_config_name is missing else l_0_config_name))
    yield ' and run `envkit render`. `envkit build '
    yield str(environment.getattr((undefined(name='target') if l_0_target is missing else l_0_target), 'name'))
    yield "`\n# stages the build context this file expects: the run wrapper (envkit_run.py and its modules), project/ (the\n# project's files: git's list less its .dockerignore), certs/, wheels/"
    yield str((str_join((' and ', (undefined(name='lock_file') if l_0_lock_file is missing else l_0_lock_file), )) if (undefined(name='lock') if l_0_lock is missing else l_0_lock) else cond_expr_undefined("the inline if-expression on line 5 in 'Dockerfile.j2' evaluated to false and no else section was defined.")))
    yield '.\n'
    if (undefined(name='lock') if l_0_lock is missing else l_0_lock):
        pass
        yield '# Locked: every Python package is installed from '
        yield str((undefined(name='lock_file') if l_0_lock_file is missing else l_0_lock_file))
        yield ' (version and sha256).\n'
    else:
        pass
        yield '# UNLOCKED: only the top-level pins below are fixed; their dependencies are whatever\n# the index serves on the day of the build. `envkit lock --target '
        yield str(environment.getattr((undefined(name='target') if l_0_target is missing else l_0_target), 'name'))
        yield '` fixes them.\n'
    yield 'ARG BASE_IMAGE='
    yield str((undefined(name='base_image') if l_0_base_image is missing else l_0_base_image))
    yield '\n'
    if (t_4(environment.getattr((undefined(name='target') if l_0_target is missing else l_0_target), 'platforms')) == 1):
        pass
        yield '# The one platform target "'
        yield str(environment.getattr((undefined(name='target') if l_0_target is missing else l_0_target), 'name'))
        yield '" is for (envkit.yaml platforms): an engine of another\n# architecture builds it emulated, never a native image its lock was not resolved for.\n# hadolint ignore=DL3029\nFROM --platform='
        yield str(environment.getitem(environment.getattr((undefined(name='target') if l_0_target is missing else l_0_target), 'platforms'), 0))
        yield ' ${BASE_IMAGE}\n'
    else:
        pass
        yield '# For '
        yield str(t_3(context.eval_ctx, environment.getattr((undefined(name='target') if l_0_target is missing else l_0_target), 'platforms'), ' or '))
        yield " (envkit.yaml platforms): the build's --platform\n# (`envkit build --platform`), by default the engine's own.\n# hadolint ignore=DL3065\nFROM --platform=$TARGETPLATFORM ${BASE_IMAGE}\n"
    yield "\nARG BASE_IMAGE\n# The base's digest, for the label; `envkit build --base-image` passes the override's.\nARG BASE_DIGEST="
    yield str((undefined(name='base_digest') if l_0_base_digest is missing else l_0_base_digest))
    yield '\n\n'
    if environment.getattr((undefined(name='target') if l_0_target is missing else l_0_target), 'env'):
        pass
        yield 'ENV '
        l_1_loop = missing
        for (l_1_name, l_1_value), l_1_loop in LoopContext(context.call(environment.getattr(environment.getattr((undefined(name='target') if l_0_target is missing else l_0_target), 'env'), 'items')), undefined):
            _loop_vars = {}
            pass
            yield str(l_1_name)
            yield '='
            yield str(t_2(l_1_value))
            yield str((' \\\n    ' if (not environment.getattr(l_1_loop, 'last')) else cond_expr_undefined("the inline if-expression on line 30 in 'Dockerfile.j2' evaluated to false and no else section was defined.")))
        l_1_loop = l_1_name = l_1_value = missing
        yield '\n\n'
    yield '# pip, torchvision downloads and requests all trust the system bundle, which\n# includes any extra CA (a corporate proxy that re-signs HTTPS).\nENV PIP_DISABLE_PIP_VERSION_CHECK=1 \\\n    PYTHONUNBUFFERED=1 \\\n    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \\\n    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \\\n    REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt\n\n# OS packages change least, so they come first. apt speaks plain http here, so\n# it needs no extra CA. '
    if (undefined(name='apt_snapshot') if l_0_apt_snapshot is missing else l_0_apt_snapshot):
        pass
        yield 'Versions come from the '
        yield str(t_1(environment.getattr((undefined(name='apt_snapshot') if l_0_apt_snapshot is missing else l_0_apt_snapshot), 'distro')))
        yield ' snapshot archive\n# as of '
        yield str(environment.getattr((undefined(name='apt_snapshot') if l_0_apt_snapshot is missing else l_0_apt_snapshot), 'timestamp'))
        if (environment.getattr((undefined(name='apt_snapshot') if l_0_apt_snapshot is missing else l_0_apt_snapshot), 'distro') == 'debian'):
            pass
            yield ' (its Release files have expired: check-valid-until=no)'
        yield '.\n'
    else:
        pass
        yield 'Versions come from the pinned base image.\n'
    yield "# apt's logs and caches differ between two identical builds: they leave the layer.\n# hadolint ignore=DL3008\n"
    if ((undefined(name='apt_snapshot') if l_0_apt_snapshot is missing else l_0_apt_snapshot) and (environment.getattr((undefined(name='apt_snapshot') if l_0_apt_snapshot is missing else l_0_apt_snapshot), 'distro') == 'debian')):
        pass
        yield 'RUN . /etc/os-release \\\n && archive="http://snapshot.debian.org/archive" \\\n && printf \'deb [check-valid-until=no] %s/debian/'
        yield str(environment.getattr((undefined(name='apt_snapshot') if l_0_apt_snapshot is missing else l_0_apt_snapshot), 'timestamp'))
        yield ' %s main\\n\' "$archive" "$VERSION_CODENAME" "$archive" "$VERSION_CODENAME-updates" >/etc/apt/sources.list \\\n && printf \'deb [check-valid-until=no] %s/debian-security/'
        yield str(environment.getattr((undefined(name='apt_snapshot') if l_0_apt_snapshot is missing else l_0_apt_snapshot), 'timestamp'))
        yield ' %s-security main\\n\' "$archive" "$VERSION_CODENAME" >>/etc/apt/sources.list \\\n && rm -f /etc/apt/sources.list.d/debian.sources \\\n && apt-get update \\\n'
    else:
        pass
        yield 'RUN apt-get update '
        yield str((undefined(name='apt_install_flags') if l_0_apt_install_flags is missing else l_0_apt_install_flags))
        yield '\\\n'
    yield ' && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends '
    yield str((undefined(name='apt_install_flags') if l_0_apt_install_flags is missing else l_0_apt_install_flags))
    yield '\\\n'
    for l_1_package in (['ca-certificates'] + t_5(context.eval_ctx, environment.getattr((undefined(name='target') if l_0_target is missing else l_0_target), 'apt_packages'))):
        _loop_vars = {}
        pass
        yield '      '
        yield str(t_6(l_1_package))
        yield ' \\\n'
    l_1_package = missing
    yield ' && rm -rf '
    yield str((undefined(name='apt_leftovers') if l_0_apt_leftovers is missing else l_0_apt_leftovers))
    yield "\n\n# Set from the commit time by `envkit build`: pip and venv then write .pyc files\n# that check their source's hash instead of embedding its mtime, useradd dates\n# the account from it, and BuildKit >= 0.13 stamps files with it.\nARG SOURCE_DATE_EPOCH\n# Extra CA certificates are trusted before anything speaks HTTPS. One venv at\n# /opt/venv serves python:*-slim and distro python3 bases alike; the base must\n# carry the Python this target was validated for.\nCOPY certs/ /usr/local/share/ca-certificates/envkit/\n"
    if (undefined(name='libpython') if l_0_libpython is missing else l_0_libpython):
        pass
        yield "# torch_xla's _XLAC links "
        yield str((undefined(name='libpython') if l_0_libpython is missing else l_0_libpython))
        yield '.so.1.0 (pytorch/xla#6372):\n# python:*-slim ships it, a distro python3 base needs its libpython package.\n# hadolint ignore=DL3008\n'
    yield 'RUN update-ca-certificates \\\n'
    if (undefined(name='user') if l_0_user is missing else l_0_user):
        pass
        yield ' && groupadd --gid '
        yield str(environment.getattr((undefined(name='user') if l_0_user is missing else l_0_user), 'id'))
        yield ' '
        yield str(environment.getattr((undefined(name='user') if l_0_user is missing else l_0_user), 'name'))
        yield ' \\\n && useradd --uid '
        yield str(environment.getattr((undefined(name='user') if l_0_user is missing else l_0_user), 'id'))
        yield ' --gid '
        yield str(environment.getattr((undefined(name='user') if l_0_user is missing else l_0_user), 'id'))
        yield ' --create-home --shell /usr/sbin/nologin '
        yield str(environment.getattr((undefined(name='user') if l_0_user is missing else l_0_user), 'name'))
        yield ' \\\n && mkdir -p /workspace/data /workspace/results \\\n && chown '
        yield str(environment.getattr((undefined(name='user') if l_0_user is missing else l_0_user), 'id'))
        yield ':'
        yield str(environment.getattr((undefined(name='user') if l_0_user is missing else l_0_user), 'id'))
        yield ' /workspace/data /workspace/results \\\n'
    else:
        pass
        yield ' && mkdir -p /workspace/data /workspace/results \\\n'
    yield ' && python3 -c \'import sys; found = "%d.%d" % sys.version_info[:2]; sys.exit(None if found == "'
    yield str(environment.getattr((undefined(name='target') if l_0_target is missing else l_0_target), 'python'))
    yield '" else "envkit: the base image has Python " + found + " but target '
    yield str(environment.getattr((undefined(name='target') if l_0_target is missing else l_0_target), 'name'))
    yield ' needs '
    yield str(environment.getattr((undefined(name='target') if l_0_target is missing else l_0_target), 'python'))
    yield '; set its python or base_image")\' \\\n'
    if (undefined(name='libpython') if l_0_libpython is missing else l_0_libpython):
        pass
        yield ' && if ! python3 -c \'import ctypes; ctypes.CDLL("'
        yield str((undefined(name='libpython') if l_0_libpython is missing else l_0_libpython))
        yield '.so.1.0")\' 2>/dev/null; then \\\n      apt-get update '
        yield str((undefined(name='apt_install_flags') if l_0_apt_install_flags is missing else l_0_apt_install_flags))
        yield '\\\n      && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends '
        yield str((undefined(name='apt_install_flags') if l_0_apt_install_flags is missing else l_0_apt_install_flags))
        yield str((undefined(name='libpython') if l_0_libpython is missing else l_0_libpython))
        yield ' \\\n      && rm -rf '
        yield str((undefined(name='apt_leftovers') if l_0_apt_leftovers is missing else l_0_apt_leftovers))
        yield '; \\\n    fi \\\n'
    yield " && python3 -m venv /opt/venv\nENV VIRTUAL_ENV=/opt/venv \\\n    PATH=/opt/venv/bin:$PATH\n\n# Dependencies before the project's files, so a code edit rebuilds one layer.\n# wheels/ is bind-mounted (never stored in a layer); PIP_NO_INDEX=1 restricts\n# pip to it. The cache mount keeps downloads across rebuilds.\n# The pip arguments are declared here, not at the top, so that changing them\n# keeps the OS layers above cached. PIP_INDEX_URL is pip's own setting: unset,\n# pip uses its default index.\n# An index's credentials never go in an ARG, whose value `docker history` keeps: `envkit build --build-arg\n# PIP_INDEX_URL=URL` with them passes the URL as the build secret pip_index_url, which the pip steps read,\n# and this ARG the URL without them.\n"
    if environment.getattr((undefined(name='target') if l_0_target is missing else l_0_target), 'pip_index_url'):
        pass
        yield 'ARG PIP_INDEX_URL='
        yield str(environment.getattr((undefined(name='target') if l_0_target is missing else l_0_target), 'pip_index_url'))
        yield '\n'
    else:
        pass
        yield 'ARG PIP_INDEX_URL\n'
    yield 'ARG PIP_NO_INDEX=\n'
    if (undefined(name='torch_find_links') if l_0_torch_find_links is missing else l_0_torch_find_links):
        pass
        yield '# One index: torch and torchvision come from their project pages on PyTorch\'s\n# index (pip\'s find-links), never from a second index that could serve any name.\n# `envkit build --wheelhouse` empties it: the wheelhouse holds them.\nARG TORCH_FIND_LINKS="'
        yield str(t_3(context.eval_ctx, (undefined(name='torch_find_links') if l_0_torch_find_links is missing else l_0_torch_find_links), ' '))
        yield '"\n'
    if (undefined(name='lock') if l_0_lock is missing else l_0_lock):
        pass
        yield '# Exactly the lock: no resolver, no dependency beyond it, no source builds, and\n# pip refuses any file whose sha256 the lock does not list.\nCOPY '
        yield str((undefined(name='lock_file') if l_0_lock_file is missing else l_0_lock_file))
        yield ' /opt/envkit/'
        yield str((undefined(name='lock_file') if l_0_lock_file is missing else l_0_lock_file))
        yield '\nENV ENVKIT_LOCK_SHA256='
        yield str(environment.getattr((undefined(name='lock') if l_0_lock is missing else l_0_lock), 'sha256'))
        yield '\nRUN --mount=type=cache,target=/root/.cache/pip \\\n    --mount=type=bind,source=wheels,target=/wheels \\\n    --mount=type=secret,id=pip_index_url \\\n    if [ -s /run/secrets/pip_index_url ]; then read -r PIP_INDEX_URL </run/secrets/pip_index_url; export PIP_INDEX_URL; fi \\\n && PIP_NO_INDEX="${PIP_NO_INDEX:-0}" '
        if (undefined(name='torch_find_links') if l_0_torch_find_links is missing else l_0_torch_find_links):
            pass
            yield 'PIP_FIND_LINKS="${TORCH_FIND_LINKS}" '
        yield 'pip install \\\n      --require-hashes --no-deps --only-binary=:all: --find-links /wheels \\\n'
        for l_1_link in environment.getattr((undefined(name='target') if l_0_target is missing else l_0_target), 'find_links'):
            _loop_vars = {}
            pass
            yield '      --find-links '
            yield str(t_6(l_1_link))
            yield ' \\\n'
        l_1_link = missing
        yield '      -r /opt/envkit/'
        yield str((undefined(name='lock_file') if l_0_lock_file is missing else l_0_lock_file))
        yield '\n'
    else:
        pass
        yield 'RUN --mount=type=cache,target=/root/.cache/pip \\\n    --mount=type=bind,source=wheels,target=/wheels \\\n    --mount=type=secret,id=pip_index_url \\\n    if [ -s /run/secrets/pip_index_url ]; then read -r PIP_INDEX_URL </run/secrets/pip_index_url; export PIP_INDEX_URL; fi \\\n && PIP_NO_INDEX="${PIP_NO_INDEX:-0}" '
        if (undefined(name='torch_find_links') if l_0_torch_find_links is missing else l_0_torch_find_links):
            pass
            yield 'PIP_FIND_LINKS="${TORCH_FIND_LINKS}" '
        yield 'pip install --find-links /wheels \\\n'
        for l_1_link in environment.getattr((undefined(name='target') if l_0_target is missing else l_0_target), 'find_links'):
            _loop_vars = {}
            pass
            yield '      --find-links '
            yield str(t_6(l_1_link))
            yield ' \\\n'
        l_1_link = missing
        l_1_loop = missing
        for l_1_requirement, l_1_loop in LoopContext((undefined(name='requirements') if l_0_requirements is missing else l_0_requirements), undefined):
            _loop_vars = {}
            pass
            yield '      '
            yield str(t_6(l_1_requirement))
            yield str((' \\' if (not environment.getattr(l_1_loop, 'last')) else cond_expr_undefined("the inline if-expression on line 145 in 'Dockerfile.j2' evaluated to false and no else section was defined.")))
            yield '\n'
        l_1_loop = l_1_requirement = missing
    yield '\n# The run wrapper: every command starts through it and gets its results file (run.sh, the engines).\nCOPY '
    yield str(t_3(context.eval_ctx, (undefined(name='wrapper_files') if l_0_wrapper_files is missing else l_0_wrapper_files), ' '))
    yield " /opt/envkit/\n# Every command runs from the project's root, as it does in the project's checkout. run.sh runs it as the\n# caller (any uid), and programs write beside themselves (dvclive/, checkpoints): the folder is writable by all.\nCOPY project/ /workspace/project/\nRUN chmod -R a+rwX /workspace/project\nWORKDIR /workspace/project\n# What a run writes here vanishes with the container: the wrapper copies the files a run created or changed\n# into the run's folder under the mounted results (envkit/support/provenance_files.py).\nENV ENVKIT_CONTAINER_PROJECT=/workspace/project\n"
    if (undefined(name='user') if l_0_user is missing else l_0_user):
        pass
        yield 'USER '
        yield str(environment.getattr((undefined(name='user') if l_0_user is missing else l_0_user), 'id'))
        yield ':'
        yield str(environment.getattr((undefined(name='user') if l_0_user is missing else l_0_user), 'id'))
        yield '\n'
    yield '\n# Last, so that a new revision only rebuilds these metadata layers. The full commit hash, as\n# results record it on the host; empty when built without git, so results say null, not a placeholder.\nARG ENVKIT_REVISION=\nENV ENVKIT_REVISION=${ENVKIT_REVISION}\nLABEL org.opencontainers.image.revision="${ENVKIT_REVISION}" \\\n      org.opencontainers.image.base.name="${BASE_IMAGE}" \\\n      '
    yield str((undefined(name='base_digest_label') if l_0_base_digest_label is missing else l_0_base_digest_label))
    yield '="${BASE_DIGEST}" \\\n'
    l_1_loop = missing
    for (l_1_name, l_1_value), l_1_loop in LoopContext((undefined(name='labels') if l_0_labels is missing else l_0_labels), undefined):
        _loop_vars = {}
        pass
        yield '      '
        yield str(l_1_name)
        yield '='
        yield str(t_2(l_1_value))
        yield str((' \\' if (not environment.getattr(l_1_loop, 'last')) else cond_expr_undefined("the inline if-expression on line 171 in 'Dockerfile.j2' evaluated to false and no else section was defined.")))
        yield '\n'
    l_1_loop = l_1_name = l_1_value = missing

blocks = {}
debug_info = '1=63&2=67&3=75&5=79&6=81&7=84&10=89&12=92&13=94&14=97&17=99&19=104&27=107&29=109&30=113&43=123&44=128&49=137&52=140&53=142&57=147&59=150&60=152&61=156&63=160&73=162&74=165&79=168&80=171&81=175&83=181&87=189&88=195&89=198&90=200&91=202&92=205&108=208&109=211&114=217&118=220&120=222&123=225&124=229&129=231&131=235&132=239&134=243&140=248&141=252&142=256&144=260&145=264&150=269&159=271&160=274&169=279&170=282&171=286'
# Generated by scripts/generate_validators.py from templates/Dockerfile.j2: do not edit
