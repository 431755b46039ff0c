//! Per-object queues of a primary: writes to one object run one at a time, in arrival order, so
//! an object never has two versions in flight; reads share the object with each other but wait
//! for a write in progress, so they never return data that is not yet on every replica.
//!
//! An object has an entry only while someone holds or waits for it. The bound is that of the ops
//! in flight (`limits`).

use std::cell::RefCell;
use std::sync::Arc;

use engine::ObjectId;
use stdx::HashMap;
use tokio::sync::{OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock};

#[derive(Default)]
pub(crate) struct ObjectLocks {
    objects: RefCell<HashMap<ObjectId, Arc<RwLock<()>>>>,
}

/// An object held for reading or writing; released on drop.
pub(crate) struct ObjectGuard<'a> {
    locks: &'a ObjectLocks,
    object: ObjectId,
    lock: Arc<RwLock<()>>,
    read: Option<OwnedRwLockReadGuard<()>>,
    write: Option<OwnedRwLockWriteGuard<()>>,
}

impl ObjectLocks {
    fn entry(&self, object: ObjectId) -> Arc<RwLock<()>> {
        self.objects.borrow_mut().entry(object).or_default().clone()
    }

    /// Waits for the object to be free of writers, then holds it for reading.
    pub(crate) async fn read(&self, object: ObjectId) -> ObjectGuard<'_> {
        let lock = self.entry(object);
        let mut guard = ObjectGuard { locks: self, object, lock: lock.clone(), read: None, write: None };
        guard.read = Some(lock.read_owned().await);
        guard
    }

    /// Waits for every earlier holder of the object, then holds it alone.
    pub(crate) async fn write(&self, object: ObjectId) -> ObjectGuard<'_> {
        let lock = self.entry(object);
        let mut guard = ObjectGuard { locks: self, object, lock: lock.clone(), read: None, write: None };
        guard.write = Some(lock.write_owned().await);
        guard
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.objects.borrow().len()
    }
}

impl Drop for ObjectGuard<'_> {
    fn drop(&mut self) {
        self.read = None;
        self.write = None;
        // Ours and the table's: nobody else holds or waits for the object.
        if Arc::strong_count(&self.lock) == 2 {
            let mut objects = self.locks.objects.borrow_mut();
            if objects.get(&self.object).is_some_and(|lock| Arc::ptr_eq(lock, &self.lock)) {
                objects.remove(&self.object);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn writes_to_one_object_run_in_order_and_entries_go_away() {
        let locks = Rc::new(ObjectLocks::default());
        let log = Rc::new(RefCell::new(Vec::new()));
        let object = ObjectId { inode: 1, stripe: 2 };
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let mut tasks = Vec::new();
                for index in 0..4 {
                    let (locks, log) = (locks.clone(), log.clone());
                    tasks.push(tokio::task::spawn_local(async move {
                        let guard = if index == 2 { locks.read(object).await } else { locks.write(object).await };
                        log.borrow_mut().push((index, "start"));
                        tokio::task::yield_now().await;
                        log.borrow_mut().push((index, "end"));
                        drop(guard);
                    }));
                }
                for task in tasks {
                    task.await.unwrap();
                }
            })
            .await;
        {
            let log = log.borrow();
            for pair in log.chunks(2) {
                assert_eq!(pair[0].0, pair[1].0, "ops overlapped: {log:?}");
            }
            assert_eq!(log.iter().map(|(index, _)| *index).step_by(2).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
        }
        assert_eq!(locks.len(), 0);

        // Reads share the object; a dropped waiter leaves nothing behind.
        let first = locks.read(object).await;
        let second = locks.read(object).await;
        assert!(futures_util::FutureExt::now_or_never(locks.write(object)).is_none());
        drop(first);
        drop(second);
        assert_eq!(locks.len(), 0);
    }
}
