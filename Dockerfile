# Ridgeline service image: migrations and catalog load on start, then uvicorn.
# Build:  docker build -t ridgeline .
# Run:    docker run -p 8000:8000 -e RIDGELINE_DATABASE_URL=postgresql+psycopg://... \
#           -e RIDGELINE_ENVIRONMENT=production -e RIDGELINE_API_KEYS=<key> ridgeline

FROM python:3.11-slim AS build
WORKDIR /src
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
COPY pyproject.toml README.md ./
COPY app ./app
# Dependencies only: the service runs from its source tree, beside alembic.ini and migrations/.
RUN /opt/venv/bin/pip install . && /opt/venv/bin/pip uninstall --yes ridgeline

FROM python:3.11-slim AS runtime
RUN useradd --create-home --uid 10001 ridgeline
WORKDIR /srv/ridgeline
COPY --from=build /opt/venv /opt/venv
COPY alembic.ini ./
COPY migrations ./migrations
COPY app ./app
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    RIDGELINE_DATABASE_URL=sqlite:////srv/ridgeline/data/ridgeline.db
RUN mkdir -p /srv/ridgeline/data && chown -R ridgeline /srv/ridgeline/data
USER ridgeline
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
    CMD python -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2).status != 200)"
CMD ["sh", "-c", "python -m app.cli migrate && python -m app.cli load-catalog && exec uvicorn --factory app.main:create_app --host 0.0.0.0 --port 8000 --no-access-log --proxy-headers"]
