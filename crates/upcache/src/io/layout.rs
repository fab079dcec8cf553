//! Where each page of a file lives in the device array (SAFS §3.3).
//!
//! A file is cut into stripe units of `stripe_pages` pages. Stripe unit `s` is in row
//! `r = s / n` and column `c = s % n` of an `n`-device array; it goes to device
//! `(c + shift(r)) % n`, at slot `r` of that device's backing file. The kind of layout is the
//! shift, chosen when the array is created and recorded in its catalog:
//! - **stripe** (the default): `shift(r) = 0`, so page `p` lives on device
//!   `(p * page_size / stripe_unit) % n` (the issue 2 formula);
//! - **rotate** (rotated striping): `shift(r) = r % n`, so consecutive rows start on
//!   consecutive devices and a sequential stream that is not a multiple of `n` stripe units
//!   long does not keep hitting device 0 first;
//! - **hash**: `shift(r)` is a hash of the row, so rows start on pseudo-random devices and no
//!   regular access stride lines up with the device count.
//!
//! Every row holds exactly one stripe unit per device, so each kind is a bijection and a
//! device's slots follow each other in its backing file: stripe units in rows `r` and `r + 1`
//! on one device are adjacent there, which lets write-back merge runs across stripe units.

use crate::choice::choice;

/// A device number in the array.
pub type DeviceId = usize;

choice! {
    /// How stripe units are placed on devices ([`crate::Config::with_layout`]).
    pub enum LayoutKind("layout") {
        /// Plain striping: unit `s` on device `s % n`.
        #[default]
        Stripe = "stripe",
        /// Rotated striping: row `r` starts on device `r % n`.
        Rotate = "rotate",
        /// Hash mapping: row `r` starts on a device chosen by a hash of `r`.
        Hash = "hash",
    }
}

impl LayoutKind {
    /// The number stored in the catalog.
    pub fn code(self) -> u32 {
        match self {
            LayoutKind::Stripe => 0,
            LayoutKind::Rotate => 1,
            LayoutKind::Hash => 2,
        }
    }

    /// The kind stored as `code`, if known.
    pub fn from_code(code: u32) -> Option<LayoutKind> {
        LayoutKind::ALL.into_iter().find(|k| k.code() == code)
    }
}

/// The layout of every file in an array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StripeLayout {
    page_size: u64,
    stripe_pages: u64,
    devices: u64,
    kind: LayoutKind,
}

impl StripeLayout {
    /// A layout of `devices` devices with `stripe_unit`-byte stripe units of `page_size`-byte
    /// pages. The config has checked that the stripe unit is a multiple of the page size.
    pub fn new(page_size: usize, stripe_unit: u64, devices: usize, kind: LayoutKind) -> Self {
        StripeLayout {
            page_size: page_size as u64,
            stripe_pages: stripe_unit / page_size as u64,
            devices: devices as u64,
            kind,
        }
    }

    /// Number of devices.
    pub fn devices(&self) -> usize {
        self.devices as usize
    }

    /// The device that row `row`'s column 0 goes to.
    fn shift(&self, row: u64) -> u64 {
        match self.kind {
            LayoutKind::Stripe => 0,
            LayoutKind::Rotate => row % self.devices,
            LayoutKind::Hash => {
                // murmur3's finalizer: rows are not attacker-controlled.
                let mut x = row ^ 0x9e37_79b9_7f4a_7c15;
                x ^= x >> 33;
                x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
                x ^= x >> 33;
                x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
                (x ^ (x >> 33)) % self.devices
            }
        }
    }

    /// Device of the stripe unit in column `col` of row `row`.
    fn device_of(&self, row: u64, col: u64) -> u64 {
        (col + self.shift(row)) % self.devices
    }

    /// Column of row `row` whose stripe unit is on device `dev`.
    fn column_on(&self, row: u64, dev: u64) -> u64 {
        (dev + self.devices - self.shift(row)) % self.devices
    }

    /// Device and byte offset in its backing file of page `page`.
    pub fn locate(&self, page: u64) -> (DeviceId, u64) {
        let stripe = page / self.stripe_pages;
        let (row, col) = (stripe / self.devices, stripe % self.devices);
        let dev_page = row * self.stripe_pages + page % self.stripe_pages;
        (self.device_of(row, col) as DeviceId, dev_page * self.page_size)
    }

    /// Bytes per page.
    pub fn page_size(&self) -> u64 {
        self.page_size
    }

    /// The page stored right after `page` in the same backing file.
    pub fn next_on_device(&self, page: u64) -> Option<u64> {
        if !(page + 1).is_multiple_of(self.stripe_pages) {
            return page.checked_add(1);
        }
        let stripe = page / self.stripe_pages;
        let row = stripe / self.devices;
        let dev = self.device_of(row, stripe % self.devices);
        let next = (row + 1).checked_mul(self.devices)?.checked_add(self.column_on(row + 1, dev))?;
        next.checked_mul(self.stripe_pages)
    }

    /// The page stored right before `page` in the same backing file.
    pub fn prev_on_device(&self, page: u64) -> Option<u64> {
        if !page.is_multiple_of(self.stripe_pages) {
            return Some(page - 1);
        }
        let stripe = page / self.stripe_pages;
        let row = (stripe / self.devices).checked_sub(1)?;
        let dev = self.device_of(row + 1, stripe % self.devices);
        let prev = row * self.devices + self.column_on(row, dev);
        Some(prev * self.stripe_pages + self.stripe_pages - 1)
    }

    /// Length device `dev`'s backing file needs to hold pages `0..pages` of a file.
    pub fn device_len(&self, dev: DeviceId, pages: u64) -> u64 {
        if pages == 0 {
            return 0;
        }
        let (n, sp) = (self.devices, self.stripe_pages);
        let last = (pages - 1) / sp; // the last stripe unit with a page
        let row = last / n;
        // Every earlier row holds one full unit on `dev`; in the last row, its unit is full,
        // partial (the last unit) or absent.
        let mine = row * n + self.column_on(row, dev as u64);
        let in_last_row = match mine.cmp(&last) {
            std::cmp::Ordering::Less => sp,
            std::cmp::Ordering::Equal => pages - last * sp,
            std::cmp::Ordering::Greater => 0,
        };
        (row * sp + in_last_row) * self.page_size
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn locate_matches_the_formula() {
        let l = StripeLayout::new(4096, 128 * 1024, 4, LayoutKind::Stripe);
        for p in 0..1000u64 {
            let (dev, off) = l.locate(p);
            assert_eq!(dev as u64, (p * 4096 / (128 * 1024)) % 4);
            assert_eq!(off % 4096, 0);
        }
    }

    #[test]
    fn pages_map_one_to_one_and_neighbours_agree() {
        for (&(ps, su, n), kind) in [(4096usize, 4096u64, 1usize), (4096, 16384, 3), (8192, 65536, 8)]
            .iter()
            .flat_map(|c| LayoutKind::ALL.map(|k| (c, k)))
        {
            let l = StripeLayout::new(ps, su, n, kind);
            let mut seen = std::collections::HashSet::new();
            for p in 0..500u64 {
                let loc = l.locate(p);
                assert!(seen.insert(loc), "two pages at {loc:?}");
                let next = l.next_on_device(p).unwrap();
                let (d2, o2) = l.locate(next);
                assert_eq!((d2, o2), (loc.0, loc.1 + ps as u64));
                assert_eq!(l.prev_on_device(next), Some(p));
            }
            // Every device's backing file is filled densely from slot 0.
            for dev in 0..n {
                let mut offs: Vec<u64> = (0..(n as u64 * 40 * su / ps as u64))
                    .map(|p| l.locate(p))
                    .filter(|&(d, _)| d == dev)
                    .map(|(_, o)| o)
                    .collect();
                offs.sort();
                assert!(
                    offs.iter().enumerate().all(|(i, &o)| o == i as u64 * ps as u64),
                    "{kind:?} dev {dev}"
                );
            }
        }
    }

    #[test]
    fn rotated_and_hashed_rows_start_on_different_devices() {
        for kind in [LayoutKind::Rotate, LayoutKind::Hash] {
            let l = StripeLayout::new(4096, 4096, 4, kind);
            let starts: std::collections::HashSet<_> = (0..64u64).map(|row| l.locate(row * 4).0).collect();
            assert!(starts.len() > 1, "{kind:?}");
        }
        let l = StripeLayout::new(4096, 4096, 4, LayoutKind::Rotate);
        assert_eq!((0..4u64).map(|row| l.locate(row * 4).0).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
    }

    #[test]
    fn device_len_covers_exactly_the_pages() {
        for (&(su, n), kind) in
            [(4096u64, 1usize), (16384, 3), (32768, 4)].iter().flat_map(|c| LayoutKind::ALL.map(|k| (c, k)))
        {
            let l = StripeLayout::new(4096, su, n, kind);
            for pages in 0..200u64 {
                for dev in 0..n {
                    let want = (0..pages)
                        .map(|p| l.locate(p))
                        .filter(|&(d, _)| d == dev)
                        .map(|(_, off)| off + 4096)
                        .max()
                        .unwrap_or(0);
                    assert_eq!(l.device_len(dev, pages), want, "{kind:?} su {su} n {n} pages {pages}");
                }
            }
        }
    }
}
