# A static binary on an empty base: nothing in the image but the operator.
# It needs no CA bundle: in a Pod it trusts the cluster CA from its
# ServiceAccount volume.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY *.go ./
COPY internal/ internal/
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /etcd-operator .

FROM scratch
COPY --from=build /etcd-operator /etcd-operator
USER 65532:65532
ENTRYPOINT ["/etcd-operator"]
