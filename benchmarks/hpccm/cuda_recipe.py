# hpccm's counterpart of the cuda target a user project gets from `envkit init` (tests/example_project after
# init and lock: docker/cuda/Dockerfile), for bench_render.py: the same base, apt packages, user, venv, hash-checked
# install of the lock, run wrapper, project copy, working directory, env and labels, so the two tools render
# comparable Dockerfiles. hpccm knows no Debian: python:*-slim-bookworm is apt-based, so ubuntu's building blocks fit.
# Run as: hpccm --recipe cuda_recipe.py --format docker
Stage0 += baseimage(image='python:3.11-slim-bookworm', _distro='ubuntu22', _arch='x86_64')
Stage0 += environment(variables={'PIP_DISABLE_PIP_VERSION_CHECK': '1', 'PYTHONUNBUFFERED': '1',
                                 'PIP_CERT': '/etc/ssl/certs/ca-certificates.crt',
                                 'SSL_CERT_FILE': '/etc/ssl/certs/ca-certificates.crt',
                                 'REQUESTS_CA_BUNDLE': '/etc/ssl/certs/ca-certificates.crt'})
Stage0 += apt_get(ospackages=['ca-certificates'])
Stage0 += copy(src='certs/', dest='/usr/local/share/ca-certificates/envkit/')
Stage0 += shell(commands=['update-ca-certificates',
                          'groupadd --gid 10001 envkit',
                          'useradd --uid 10001 --gid 10001 --create-home --shell /usr/sbin/nologin envkit',
                          'mkdir -p /workspace/data /workspace/results',
                          'chown 10001:10001 /workspace/data /workspace/results',
                          'python3 -m venv /opt/venv'])
Stage0 += environment(variables={'VIRTUAL_ENV': '/opt/venv', 'PATH': '/opt/venv/bin:$PATH'})
Stage0 += copy(src='requirements.lock', dest='/opt/envkit/requirements.lock')
Stage0 += shell(commands=['pip install --require-hashes --no-deps --only-binary=:all: '
                          '-r /opt/envkit/requirements.lock'])
Stage0 += copy(src='envkit_run.py', dest='/opt/envkit/envkit_run.py')
Stage0 += copy(src='project/', dest='/workspace/project/')
Stage0 += workdir(directory='/workspace/project')
Stage0 += user(user='10001:10001')
Stage0 += label(metadata={'io.envkit.kind': '"cuda"', 'io.envkit.pin.cuda': '"12.8"', 'io.envkit.pin.python': '"3.11"',
                          'io.envkit.pin.torch': '"2.9.0"', 'io.envkit.pin.torchvision': '"0.24.0"',
                          'io.envkit.platforms': '"linux/amd64"', 'io.envkit.target': '"cuda"'})
