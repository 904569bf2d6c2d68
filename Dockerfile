# syntax=docker/dockerfile:1
# Images of the three Tailor components, from one build of the workspace (the recommender with its own,
# size-optimised profile; Cargo.toml):
#   docker build --target recommender -t ghcr.io/tailor-dev/tailor-recommender:dev .
#   docker build --target updater     -t ghcr.io/tailor-dev/tailor-updater:dev .
#   docker build --target admission   -t ghcr.io/tailor-dev/tailor-admission:dev .
# The builder is Debian 12 (bookworm) so the binaries link against the same glibc as the distroless
# cc-debian12 runtime; the runtime has no shell or package manager and runs as a non-root user.

ARG RUST_IMAGE=rust:1.95-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM ${RUST_IMAGE} AS builder
WORKDIR /src
COPY . .
# Cache mounts keep the registry and target/ between builds; the binaries are copied out of the cached
# target/ in the same step. `-p` selects the packages, so their features are not unified with the CLI's
# (which turns on tailor-updater's `vectors`, upstream's test doubles the updater binary does not carry).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --profile dist --locked -p tailor-updater -p tailor-admission --bin tailor-updater --bin tailor-admission \
 && cargo build --profile dist-recommender --locked -p tailor-recommender --bin tailor-recommender \
 && mkdir -p /out \
 && cp target/dist-recommender/tailor-recommender target/dist/tailor-updater target/dist/tailor-admission /out/

FROM ${RUNTIME_IMAGE} AS recommender
LABEL org.opencontainers.image.title="tailor-recommender" \
      org.opencontainers.image.description="Tailor VPA recommender" \
      org.opencontainers.image.source="https://github.com/tailor-dev/tailor" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/tailor-recommender /usr/local/bin/tailor-recommender
# mimalloc: commit memory only when used and return freed pages at once (the recommender's RSS falls back
# after each loop's writes; docs/decisions/release-profiles.md).
ENV MIMALLOC_ARENA_EAGER_COMMIT=0 MIMALLOC_PURGE_DELAY=0
USER 65532:65532
EXPOSE 8942
ENTRYPOINT ["/usr/local/bin/tailor-recommender"]

FROM ${RUNTIME_IMAGE} AS updater
LABEL org.opencontainers.image.title="tailor-updater" \
      org.opencontainers.image.description="Tailor VPA updater" \
      org.opencontainers.image.source="https://github.com/tailor-dev/tailor" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/tailor-updater /usr/local/bin/tailor-updater
# mimalloc: commit memory only when used; freed pages go back after the default 10 ms (a purge delay of 0
# costs an iteration ~80 ms at 5,000 VPAs; docs/decisions/release-profiles.md).
ENV MIMALLOC_ARENA_EAGER_COMMIT=0
USER 65532:65532
EXPOSE 8943
ENTRYPOINT ["/usr/local/bin/tailor-updater"]

FROM ${RUNTIME_IMAGE} AS admission
LABEL org.opencontainers.image.title="tailor-admission" \
      org.opencontainers.image.description="Tailor VPA admission webhook" \
      org.opencontainers.image.source="https://github.com/tailor-dev/tailor" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/tailor-admission /usr/local/bin/tailor-admission
# mimalloc: commit memory only when used and return freed pages at once (startup RSS 23 MiB instead of 65,
# and memory falls back after large reviews; docs/benchmarks/webhook.md, soak).
ENV MIMALLOC_ARENA_EAGER_COMMIT=0 MIMALLOC_PURGE_DELAY=0
USER 65532:65532
EXPOSE 8000 8944
ENTRYPOINT ["/usr/local/bin/tailor-admission"]
