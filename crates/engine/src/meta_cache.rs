//! A bounded cache of metadata pages (object entries with their page checksums).
//!
//! Reads need the checksums of the pages they return; keeping them in RAM for every object
//! would blow the 32-bytes-per-object budget, so they live on disk and the hot pages are cached
//! here. Loads are single-flight: a page has at most one read in flight, and the write-back job
//! never writes a page while a read of it is in flight, so no reader ever sees a half-written
//! page. Only metadata is cached; object data is always read from the drive.

use std::collections::VecDeque;

use stdx::HashMap;

pub enum PageState {
    /// A read is in flight; these waiters get the page when it completes.
    Loading {
        waiters: Vec<Waiter>,
    },
    Ready {
        bytes: Box<[u8]>,
        pins: u32,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiter {
    Read(u64),
    Writeback,
}

pub struct MetaCache {
    pages: HashMap<u32, PageState>,
    /// Insertion order for eviction (FIFO, skipping pinned and loading pages).
    order: VecDeque<u32>,
    capacity_pages: usize,
}

pub enum Lookup<'a> {
    Hit(&'a [u8]),
    /// A load is in flight; the waiter was added.
    Pending,
    /// The caller must start a load; the page is now `Loading` with the waiter.
    StartLoad,
}

impl MetaCache {
    pub fn new(capacity_pages: usize) -> MetaCache {
        MetaCache { pages: HashMap::default(), order: VecDeque::new(), capacity_pages: capacity_pages.max(16) }
    }

    pub fn lookup(&mut self, page: u32, waiter: Waiter) -> Lookup<'_> {
        match self.pages.get_mut(&page) {
            Some(PageState::Ready { .. }) => {
                let Some(PageState::Ready { bytes, .. }) = self.pages.get(&page) else { unreachable!() };
                Lookup::Hit(bytes)
            }
            Some(PageState::Loading { waiters }) => {
                waiters.push(waiter);
                Lookup::Pending
            }
            None => {
                self.pages.insert(page, PageState::Loading { waiters: vec![waiter] });
                self.order.push_back(page);
                Lookup::StartLoad
            }
        }
    }

    pub fn get(&self, page: u32) -> Option<&[u8]> {
        match self.pages.get(&page) {
            Some(PageState::Ready { bytes, .. }) => Some(bytes),
            _ => None,
        }
    }

    /// Edits a ready page; the caller must hold a pin on it.
    pub fn get_mut(&mut self, page: u32) -> &mut [u8] {
        match self.pages.get_mut(&page) {
            Some(PageState::Ready { bytes, pins }) => {
                assert!(*pins > 0);
                bytes
            }
            _ => panic!("metadata page {page} is not resident"),
        }
    }

    /// Completes a load; returns the waiters.
    pub fn loaded(&mut self, page: u32, bytes: Box<[u8]>) -> Vec<Waiter> {
        let Some(PageState::Loading { waiters }) = self.pages.remove(&page) else {
            panic!("metadata page {page} was not loading");
        };
        let pins = waiters.iter().filter(|waiter| **waiter == Waiter::Writeback).count() as u32;
        self.pages.insert(page, PageState::Ready { bytes, pins });
        self.evict();
        waiters
    }

    /// A load failed: forget the page, return the waiters.
    pub fn load_failed(&mut self, page: u32) -> Vec<Waiter> {
        match self.pages.remove(&page) {
            Some(PageState::Loading { waiters }) => waiters,
            _ => panic!("metadata page {page} was not loading"),
        }
    }

    pub fn pin(&mut self, page: u32) {
        match self.pages.get_mut(&page) {
            Some(PageState::Ready { pins, .. }) => *pins += 1,
            _ => panic!("metadata page {page} is not resident"),
        }
    }

    pub fn unpin(&mut self, page: u32) {
        match self.pages.get_mut(&page) {
            Some(PageState::Ready { pins, .. }) => {
                assert!(*pins > 0);
                *pins -= 1;
            }
            _ => panic!("metadata page {page} is not resident"),
        }
        self.evict();
    }

    fn evict(&mut self) {
        let mut budget = self.order.len();
        while self.pages.len() > self.capacity_pages && budget > 0 {
            budget -= 1;
            let Some(page) = self.order.pop_front() else { break };
            match self.pages.get(&page) {
                Some(PageState::Ready { pins: 0, .. }) => {
                    self.pages.remove(&page);
                }
                Some(_) => self.order.push_back(page),
                None => {}
            }
        }
    }
}
