# syntax=docker/dockerfile:1
# gpuxray: a cgo build (go-nvml dlopens libnvidia-ml.so.1 at run time; the
# library comes from the node through the NVIDIA container toolkit), on a
# small glibc runtime, as a non-root user.
ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG REVISION=unknown
RUN make build VERSION="${VERSION}" REVISION="${REVISION}"

FROM gcr.io/distroless/base-debian12:nonroot
COPY --from=build /src/bin/gpuxray /usr/bin/gpuxray
USER nonroot:nonroot
EXPOSE 9471
ENTRYPOINT ["/usr/bin/gpuxray"]
CMD ["agent"]
