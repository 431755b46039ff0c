//! The checked-in gRPC stubs (`src/etcdserverpb.rs`) are what `proto/etcd.proto` generates.
//!
//! They are checked in so that building Basalt needs no `protoc` (ADR 0014). This test compiles
//! the `.proto` file with protox, a protobuf compiler written in Rust, generates the stubs with
//! the same tonic and prost versions the crate builds with, and fails when they differ.
//! `BASALT_REGENERATE=1` writes the new stubs instead.

use std::fs;
use std::path::Path;

#[test]
fn stubs_match_the_proto_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let descriptors = protox::compile([root.join("proto/etcd.proto")], [root.join("proto")])
        .unwrap_or_else(|error| panic!("proto/etcd.proto does not compile: {error}"));
    let out = tempfile::tempdir().expect("a scratch directory");
    tonic_prost_build::configure()
        .build_server(false)
        .build_transport(false)
        .out_dir(out.path())
        .compile_fds(descriptors)
        .expect("tonic-prost-build generates the stubs");
    let generated = fs::read_to_string(out.path().join("etcdserverpb.rs")).expect("the generated stubs");
    let checked_in = root.join("src/etcdserverpb.rs");
    if std::env::var_os("BASALT_REGENERATE").is_some() {
        fs::write(&checked_in, &generated).expect("write src/etcdserverpb.rs");
        return;
    }
    let current = fs::read_to_string(&checked_in).unwrap_or_default();
    assert!(
        current == generated,
        "src/etcdserverpb.rs is not what proto/etcd.proto generates; run \
         `BASALT_REGENERATE=1 cargo test -p meta-etcd --test generated` and commit the result"
    );
}
