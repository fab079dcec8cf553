//! Where each page of a file lives in the device array (SAFS §3.3, striping).
//!
//! A file is cut into stripe units of `stripe_pages` pages; stripe unit `s` goes to device
//! `s % n`, at slot `s / n` of that device's backing file. So page `p` lives on device
//! `(p * page_size / stripe_unit) % n`, and two stripe units that follow each other on one
//! device (`s` and `s + n`) are adjacent in its backing file, which lets write-back merge
//! runs that cross stripe boundaries. Rotated striping and hash mapping plug in here.

/// A device number in the array.
pub type DeviceId = usize;

/// The striping layout of every file in an array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StripeLayout {
    page_size: u64,
    stripe_pages: u64,
    devices: u64,
}

impl StripeLayout {
    /// A layout of `devices` devices with `stripe_unit`-byte stripe units of `page_size`-byte
    /// pages. The config has checked that the stripe unit is a multiple of the page size.
    pub fn new(page_size: usize, stripe_unit: u64, devices: usize) -> Self {
        StripeLayout {
            page_size: page_size as u64,
            stripe_pages: stripe_unit / page_size as u64,
            devices: devices as u64,
        }
    }

    /// Number of devices.
    pub fn devices(&self) -> usize {
        self.devices as usize
    }

    /// Device and byte offset in its backing file of page `page`.
    pub fn locate(&self, page: u64) -> (DeviceId, u64) {
        let stripe = page / self.stripe_pages;
        let dev = stripe % self.devices;
        let slot = stripe / self.devices;
        let dev_page = slot * self.stripe_pages + page % self.stripe_pages;
        (dev as DeviceId, dev_page * self.page_size)
    }

    /// The page stored right after `page` in the same backing file.
    pub fn next_on_device(&self, page: u64) -> Option<u64> {
        if !(page + 1).is_multiple_of(self.stripe_pages) {
            page.checked_add(1)
        } else {
            page.checked_add(1 + (self.devices - 1) * self.stripe_pages)
        }
    }

    /// The page stored right before `page` in the same backing file.
    pub fn prev_on_device(&self, page: u64) -> Option<u64> {
        if !page.is_multiple_of(self.stripe_pages) {
            Some(page - 1)
        } else {
            page.checked_sub(1 + (self.devices - 1) * self.stripe_pages)
        }
    }

    /// Length device `dev`'s backing file needs to hold pages `0..pages` of a file.
    pub fn device_len(&self, dev: DeviceId, pages: u64) -> u64 {
        let (n, sp, d) = (self.devices, self.stripe_pages, dev as u64);
        let full = pages / sp;
        let rem = pages % sp;
        let full_on_dev = full / n + u64::from(d < full % n);
        let partial = if rem > 0 && full % n == d { rem } else { 0 };
        (full_on_dev * sp + partial) * self.page_size
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn locate_matches_the_formula() {
        let l = StripeLayout::new(4096, 128 * 1024, 4);
        for p in 0..1000u64 {
            let (dev, off) = l.locate(p);
            assert_eq!(dev as u64, (p * 4096 / (128 * 1024)) % 4);
            assert_eq!(off % 4096, 0);
        }
    }

    #[test]
    fn pages_map_one_to_one_and_neighbours_agree() {
        for &(ps, su, n) in &[(4096usize, 4096u64, 1usize), (4096, 16384, 3), (8192, 65536, 8)] {
            let l = StripeLayout::new(ps, su, n);
            let mut seen = std::collections::HashSet::new();
            for p in 0..500u64 {
                let loc = l.locate(p);
                assert!(seen.insert(loc), "two pages at {loc:?}");
                let next = l.next_on_device(p).unwrap();
                let (d2, o2) = l.locate(next);
                assert_eq!((d2, o2), (loc.0, loc.1 + ps as u64));
                assert_eq!(l.prev_on_device(next), Some(p));
            }
        }
    }

    #[test]
    fn device_len_covers_exactly_the_pages() {
        for &(su, n) in &[(4096u64, 1usize), (16384, 3), (32768, 4)] {
            let l = StripeLayout::new(4096, su, n);
            for pages in 0..200u64 {
                for dev in 0..n {
                    let want = (0..pages)
                        .map(|p| l.locate(p))
                        .filter(|&(d, _)| d == dev)
                        .map(|(_, off)| off + 4096)
                        .max()
                        .unwrap_or(0);
                    assert_eq!(l.device_len(dev, pages), want, "su {su} n {n} pages {pages}");
                }
            }
        }
    }
}
