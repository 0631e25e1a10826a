# Multi-stage build: the release binary from the locked dependency tree, then a minimal
# image holding only /wharf, running as a non-root user.
#
# The base images are build arguments, for machines that build from a local registry or
# from locally made equivalents (e2e/image.sh): the builder needs cargo and a C compiler
# (apt-get for cmake), the runtime needs glibc and libgcc_s and a user 65532.
ARG BUILDER_IMAGE=rust:1.95-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM ${BUILDER_IMAGE} AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends cmake \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# Line tables stay in local release builds (for profiling); the image drops them.
ENV CARGO_PROFILE_RELEASE_STRIP=debuginfo
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p wharf \
 && cp target/release/wharf /wharf

# glibc and libgcc, no shell, no package manager; uid/gid 65532.
FROM ${RUNTIME_IMAGE}
COPY --from=build /wharf /wharf
USER 65532:65532
EXPOSE 8080 8443 15443 31400 15021
ENTRYPOINT ["/wharf"]
CMD ["controller"]
