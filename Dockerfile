# Ridgeline service image. Dependencies come from the lock file, in a layer of their own, so a
# change to app/ rebuilds only the last layers.
#
# Build:    docker build -t ridgeline .
# Migrate:  docker run --rm -e RIDGELINE_DATABASE_URL=... ridgeline migrate
#           (once per release, as a job of its own: replicas never race to migrate)
# Catalog:  docker run --rm -e RIDGELINE_DATABASE_URL=... ridgeline load-catalog
# Serve:    docker run -p 8000:8000 -e RIDGELINE_DATABASE_URL=postgresql+psycopg://... \
#             -e RIDGELINE_ENVIRONMENT=production -e RIDGELINE_API_KEYS=<key> ridgeline
# Without RIDGELINE_DATABASE_URL the database is SQLite in the volume /srv/ridgeline/data:
#   docker run --rm -v ridgeline-data:/srv/ridgeline/data ridgeline migrate
#   docker run --rm -v ridgeline-data:/srv/ridgeline/data ridgeline load-catalog
#   docker run -p 8000:8000 -v ridgeline-data:/srv/ridgeline/data ridgeline

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
COPY requirements/service.lock /tmp/service.lock
RUN /opt/venv/bin/pip install --requirement /tmp/service.lock

# The simulator's event loop compiled (setup.py; twice as fast): a C compiler and mypyc in this
# stage only, removed again before the venv is copied. A failed compile leaves pure Python.
FROM build AS compile
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
COPY requirements/build.lock /tmp/build.lock
RUN /opt/venv/bin/pip install --requirement /tmp/build.lock
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY app ./app
RUN /opt/venv/bin/python setup.py build_ext --inplace \
    && mkdir -p /out/app && find app -name '*.so' -exec cp --parents {} /out \; \
    && /opt/venv/bin/pip uninstall --yes mypy librt ast-serialize pathspec mypy-extensions

FROM python:3.11-slim AS runtime
RUN useradd --create-home --uid 10001 ridgeline
WORKDIR /srv/ridgeline
COPY --from=compile /opt/venv /opt/venv
COPY pyproject.toml README.md alembic.ini ./
COPY migrations ./migrations
COPY app ./app
COPY --from=compile /out/app ./app
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONPATH=/srv/ridgeline \
    PYTHONUNBUFFERED=1 \
    RIDGELINE_DATABASE_URL=sqlite:////srv/ridgeline/data/ridgeline.db
RUN mkdir -p /srv/ridgeline/data && chown -R ridgeline /srv/ridgeline/data
VOLUME ["/srv/ridgeline/data"]
USER ridgeline
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request, sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2).status != 200)"]
# `ridgeline <command>`: serve (the default), migrate, load-catalog, openapi.
ENTRYPOINT ["python", "-m", "app.cli"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000", "--proxy-headers"]
