import { describe, expect, it } from 'vitest';
import { selectTopAlert, type AlertEntry } from '../state/ui';
import { visibleColumns, type Column } from './DataTable';

const col = (accessor: string, priority: number, fixedWidth?: number, minWidth?: number): Column<unknown> => ({
  accessor, title: accessor, priority, fixedWidth, minWidth, render: () => null,
});

describe('responsive columns', () => {
  const cols = [col('id', 0, 10), col('a', 3, 10), col('b', 1, 10), col('c', 2, undefined, 20), col('actions', 0, 5)];
  it('shows everything when the width is unknown', () => {
    expect(visibleColumns(cols, null).map((c) => c.accessor)).toEqual(['id', 'a', 'b', 'c', 'actions']);
  });
  it('adds columns by ascending priority while they fit, keeping column order', () => {
    // 14 px per em: p0 = 15em (210px); +b (10em) = 350px; +c (20em) = 630px; +a (10em) = 770px.
    expect(visibleColumns(cols, 400).map((c) => c.accessor)).toEqual(['id', 'b', 'actions']);
    expect(visibleColumns(cols, 700).map((c) => c.accessor)).toEqual(['id', 'b', 'c', 'actions']);
    expect(visibleColumns(cols, 800).map((c) => c.accessor)).toEqual(['id', 'a', 'b', 'c', 'actions']);
  });
  it('always keeps priority-0 columns', () => {
    expect(visibleColumns(cols, 10).map((c) => c.accessor)).toEqual(['id', 'actions']);
  });
});

describe('alert priority', () => {
  const a = (id: string, tone: AlertEntry['tone'], createdAt: number, isVisible = true): AlertEntry => ({ id, message: id, tone, createdAt, isVisible });
  it('prefers error > warning > info, then the most recent', () => {
    expect(selectTopAlert([a('i', 'info', 5), a('w', 'warning', 1), a('e1', 'error', 2), a('e2', 'error', 3)])?.id).toBe('e2');
    expect(selectTopAlert([a('i', 'info', 5), a('w', 'warning', 1)])?.id).toBe('w');
    expect(selectTopAlert([a('e', 'error', 9, false), a('i', 'info', 1)])?.id).toBe('i');
    expect(selectTopAlert([])).toBeNull();
  });
});
