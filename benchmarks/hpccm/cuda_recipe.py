# hpccm's counterpart of envkit's cuda target (docker/cuda/Dockerfile), for bench_render.py:
# the same base, apt packages, user, venv, pinned pip install, recipes copy, env and labels,
# so the two tools render comparable Dockerfiles. Run as: hpccm --recipe cuda_recipe.py --format docker
Stage0 += baseimage(image='nvidia/cuda:12.6.3-base-ubuntu24.04', _distro='ubuntu24', _arch='x86_64')
Stage0 += environment(variables={'PIP_DISABLE_PIP_VERSION_CHECK': '1', 'PYTHONUNBUFFERED': '1',
                                 'SSL_CERT_FILE': '/etc/ssl/certs/ca-certificates.crt'})
Stage0 += apt_get(ospackages=['ca-certificates', 'python3', 'python3-venv'])
Stage0 += copy(src='certs/', dest='/usr/local/share/ca-certificates/envkit/')
Stage0 += shell(commands=['update-ca-certificates',
                          'groupadd --gid 10001 envkit',
                          'useradd --uid 10001 --gid 10001 --create-home --shell /usr/sbin/nologin envkit',
                          'mkdir -p /workspace/data /workspace/results',
                          'chown 10001:10001 /workspace/data /workspace/results',
                          'python3 -m venv /opt/venv'])
Stage0 += environment(variables={'VIRTUAL_ENV': '/opt/venv', 'PATH': '/opt/venv/bin:$PATH'})
Stage0 += shell(commands=['pip install torch==2.9.0 torchvision==0.24.0 tqdm==4.67.1'])
Stage0 += copy(src='project/', dest='/workspace/project/')
Stage0 += workdir(directory='/workspace/project')
Stage0 += user(user='10001:10001')
Stage0 += label(metadata={'io.envkit.kind': '"cuda"', 'io.envkit.pin.torch': '"2.9.0"', 'io.envkit.target': '"cuda"'})
