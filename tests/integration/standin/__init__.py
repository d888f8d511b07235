"""A local Kubernetes API server for the hostpath-provisioner integration tests.

Python 3 standard library only. It serves HTTPS on 127.0.0.1 with a CA and server
certificate made by the openssl CLI, and behaves like kube-apiserver v1.32 wherever a
client can notice: core/v1 persistentvolumes, persistentvolumeclaims, events,
namespaces, nodes, pods; storage.k8s.io/v1 storageclasses; coordination.k8s.io/v1
leases. Verbs get, list (label/field selectors, limit/continue paging over a consistent
snapshot), watch (resume from a resourceVersion out of a bounded history, 410 when too
old, bookmarks, timeoutSeconds), create, update (optimistic concurrency), delete (with
finalizers), patch (JSON, merge, strategic merge), the status subresource, Table output
for kubectl, discovery and a minimal OpenAPI v3 for kubectl's field-validation probe.

A controller thread stands in for kube-controller-manager's PV controller (binder),
the pvc/pv-protection controllers and admission plugins (DefaultStorageClass,
StorageObjectInUseProtection), and the namespace controller.

The /admin/ endpoints (see tests/integration/README.md) let tests inject faults, close
watches, compact history, inject malformed watch lines and read a request log.

Usage: apiserver.py --state-dir DIR [--port 0] [--token T] [--binder on|off] ...

The package, module by module (each imports only from the ones above it):

  common        version, log, JSON helpers, uids, timestamps, the per-request thread-local
  errors        metav1.Status errors and field errors (with Go's renderings of values)
  validation    names, labels, annotations, finalizers: ObjectMeta validation
  quantity      resource quantities and timestamps (decode-level canonicalisation)
  selectors     label and field selectors
  patch         JSON merge patch, JSON patch, strategic merge patch
  kinds/        the 15 kinds: defaulting, strategies, validation, tables, known fields
  store         objects, the resourceVersion counter, watch history, persistence
  registry      the verbs (admission, strategies, validation), managedFields, list tokens
  controllers   PV binder, pvc/pv protection, GC finalizers, namespace controller
  protobuf      protobuf request bodies
  tables        server-side printing (Table)
  discovery     discovery documents and OpenAPI v3
  auth          authentication (tokens, client certificates) and the RBAC authorizer
  watch         watch streams
  resources     get/list/create/update/patch/delete of a resource
  admin         the /admin/ endpoints and injected faults
  handler       the HTTP request handler: parsing, dispatch, routing, responses
  certs         CA, certificates and kubeconfig (also used by the test harnesses)
  server        shared state, the TLS server, APF classification objects, main()

Run it with tests/integration/apiserver.py (a shim calling server.main) or, from
tests/integration, with `python3 -m standin`.
"""
