# Image for the web, worker and beat processes (and the simulated cluster in docker-compose).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app

COPY requirements/ requirements/
RUN pip install -r requirements/base.txt

COPY . .
RUN DJANGO_DEBUG=0 DJANGO_SECRET_KEY=collectstatic-only ALLOWED_HOSTS=localhost \
    DATABASE_URL=postgres://unused/unused python manage.py collectstatic --noinput \
 && useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin app

USER 10001
EXPOSE 8000
CMD ["gunicorn", "controlplane.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3", "--access-logfile", "-"]
