//! `basalt snapshot diff VOLUME@OLD VOLUME@NEWER`: the extents of NEWER (a later snapshot of the
//! same volume, or the volume itself, or a clone of OLD or of a later snapshot, or its
//! snapshots) that may differ from OLD, as the NBD export of NEWER
//! reports them in its `qemu:dirty-bitmap:OLD` context. Asked of the OSDs through the client
//! library, which reads no data: each primary answers from the pages the layers above OLD hold.

use anyhow::{bail, Context};
use serde::Serialize;

use crate::api_client::{print_json, print_table, ApiArgs, ClusterArgs};
use crate::size::format_bytes;

/// One run of changed bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ChangedExtent {
    pub offset_bytes: u64,
    pub length_bytes: u64,
}

/// What `--json` prints.
#[derive(Debug, Serialize)]
struct DiffView {
    from: String,
    to: String,
    size_bytes: u64,
    changed_bytes: u64,
    extents: Vec<ChangedExtent>,
}

pub fn run(api: &ApiArgs, from: &str, to: &str) -> anyhow::Result<()> {
    if cluster::split_snapshot_name(from).is_none() {
        bail!("{from:?} names no snapshot: the older side of a diff is VOLUME@SNAPSHOT");
    }
    if from == to {
        bail!("{from} is compared with itself: name an earlier and a later snapshot");
    }
    let meta_url = ClusterArgs { meta_url: None, api: api.api.clone() }.meta_url()?;
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the runtime")?;
    let (size_bytes, extents) = runtime.block_on(changed_extents(&meta_url, from, to))?;
    let changed_bytes = extents.iter().map(|extent| extent.length_bytes).sum();
    if api.json {
        let view = DiffView { from: from.to_string(), to: to.to_string(), size_bytes, changed_bytes, extents };
        print_json(&serde_json::to_value(view).expect("a diff serializes"));
        return Ok(());
    }
    let rows: Vec<Vec<String>> =
        extents.iter().map(|extent| vec![extent.offset_bytes.to_string(), extent.length_bytes.to_string()]).collect();
    print_table(&["OFFSET", "LENGTH"], &rows);
    println!(
        "{to} differs from {from} in {} of {} ({} extents)",
        format_bytes(changed_bytes),
        format_bytes(size_bytes),
        extents.len()
    );
    Ok(())
}

/// The size of `to` and its extents that may differ from its earlier snapshot `from`.
async fn changed_extents(meta_url: &str, from: &str, to: &str) -> anyhow::Result<(u64, Vec<ChangedExtent>)> {
    let client = client::Client::connect_with(meta_url, client::ClientOptions::default())
        .await
        .with_context(|| format!("cannot reach the cluster at {meta_url}"))?;
    let volume = if cluster::split_snapshot_name(to).is_some() {
        client.open_snapshot(to).await
    } else {
        client.open_volume(to).await
    }
    .with_context(|| format!("cannot open {to}"))?;
    let size_bytes = volume.size_bytes();
    let size_bytes = size_bytes - size_bytes % client::BLOCK_SIZE_BYTES;
    let mut extents: Vec<ChangedExtent> = Vec::new();
    let mut offset_bytes = 0;
    while offset_bytes < size_bytes {
        let runs = match volume.changes(from, offset_bytes, size_bytes - offset_bytes).await {
            Ok(runs) => runs,
            Err(client::ClientError::NotEarlier { .. }) => bail!(not_earlier(&volume, from, to, &client)),
            Err(error) => return Err(error).with_context(|| format!("cannot compare {to} with {from}")),
        };
        anyhow::ensure!(!runs.is_empty(), "the cluster reported nothing for {to} at offset_bytes={offset_bytes}");
        for (length_bytes, changed) in runs {
            if changed {
                match extents.last_mut() {
                    Some(last) if last.offset_bytes + last.length_bytes == offset_bytes => {
                        last.length_bytes += length_bytes
                    }
                    _ => extents.push(ChangedExtent { offset_bytes, length_bytes }),
                }
            }
            offset_bytes += length_bytes;
        }
    }
    Ok((size_bytes, extents))
}

/// Why `from` is not below `to` in its chain: named in the wrong order, of unrelated volumes,
/// or passed by a rollback.
fn not_earlier(to_volume: &client::Volume, from: &str, to: &str, client: &client::Client) -> String {
    let map = client.map();
    let later = map.snapshots.get(from).is_some_and(|record| {
        let below = map.chain(record.inode).skip(1).any(|(layer, _)| layer == to_volume.id());
        below
    });
    let volume_of = |name: &'_ str| cluster::split_snapshot_name(name).map_or(name.to_string(), |(v, _)| v.to_string());
    let (from_volume, to_name) = (volume_of(from), volume_of(to));
    if later {
        format!("{to} is older than {from}: name the earlier snapshot first")
    } else if from_volume != to_name {
        format!(
            "{from} and {to} belong to different volumes ({from_volume} and {to_name}) and {to} does not read \
             through {from} (it is not a clone of it): a diff compares layers of one chain"
        )
    } else {
        format!("{from} is not below {to} in its chain (a rollback to an older snapshot went past it)")
    }
}
