# syntax=docker/dockerfile:1
# gpuxray: a cgo build (go-nvml dlopens libnvidia-ml.so.1 at run time; the
# library comes from the node through the NVIDIA container toolkit), on a
# small glibc runtime, as a non-root user.
#
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg VERSION=$(git describe --tags --always) --build-arg REVISION=$(git rev-parse HEAD) -t gpuxray .
#
# The build stage runs on the builder's own platform and cross-compiles with
# Debian's C cross compiler, through the same make target CI runs
# (make image-binaries), so CI's cross-build proves this stage.
ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-bookworm AS build
ARG TARGETARCH
RUN set -e; \
    case "${TARGETARCH}" in \
      "$(go env GOARCH)") ;; \
      arm64) apt-get update && apt-get install -y --no-install-recommends gcc-aarch64-linux-gnu libc6-dev-arm64-cross ;; \
      amd64) apt-get update && apt-get install -y --no-install-recommends gcc-x86-64-linux-gnu libc6-dev-amd64-cross ;; \
      *) echo "unsupported TARGETARCH ${TARGETARCH}" >&2; exit 1 ;; \
    esac; \
    rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG REVISION=unknown
RUN make image-binaries PLATFORMS="linux/${TARGETARCH}" BINDIR=/out VERSION="${VERSION}" REVISION="${REVISION}"

# glibc (cgo), CA certificates, tzdata, a nonroot user (65532), no shell.
FROM gcr.io/distroless/base-debian12:nonroot
ARG TARGETARCH
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="gpuxray" \
      org.opencontainers.image.source="https://github.com/gpuxray/gpuxray" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY LICENSE NOTICE /usr/share/doc/gpuxray/
COPY --from=build /out/linux_${TARGETARCH}/gpuxray /usr/bin/gpuxray
# Non-root by default; the DaemonSet runs it as uid 0 with no capability,
# because only root may connect to the kubelet's pod-resources socket.
USER 65532:65532
EXPOSE 9471
ENTRYPOINT ["/usr/bin/gpuxray"]
CMD ["agent"]
