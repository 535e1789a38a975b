//! Strided f32 views of [`super::matmul`]'s inputs, and the pointer its parallel tasks share.
#![allow(unsafe_code)] // Send and Sync for a pointer whose tasks write disjoint parts.

/// An f32 matrix view: element `(i, j)` at `data[offset + i * row_stride + j * col_stride]`.
#[derive(Clone, Copy, Debug)]
pub struct View<'a> {
    /// The storage.
    pub data: &'a [f32],
    /// Where element `(0, 0)` is.
    pub offset: usize,
    /// Step between rows.
    pub row_stride: usize,
    /// Step between columns.
    pub col_stride: usize,
}

impl<'a> View<'a> {
    /// A contiguous row-major matrix with `cols` columns.
    pub fn row_major(data: &'a [f32], cols: usize) -> Self {
        Self {
            data,
            offset: 0,
            row_stride: cols,
            col_stride: 1,
        }
    }

    /// The transpose of this view.
    pub fn t(self) -> Self {
        Self {
            row_stride: self.col_stride,
            col_stride: self.row_stride,
            ..self
        }
    }

    pub(super) fn check(&self, rows: usize, cols: usize, what: &str) {
        if rows == 0 || cols == 0 {
            return;
        }
        let last = self.offset + (rows - 1) * self.row_stride + (cols - 1) * self.col_stride;
        assert!(
            last < self.data.len(),
            "{what}: a {rows} × {cols} view reaches element {last} of {}",
            self.data.len()
        );
    }
}
