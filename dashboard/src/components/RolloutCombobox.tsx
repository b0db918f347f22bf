// Searchable rollout selector: newest rollouts, server-side search after a 300 ms debounce.
import { useEffect, useRef, useState } from 'react';
import type { ApiClient } from '../api/client';
import { fetchRollouts } from '../api/queries';
import type { Rollout } from '../api/types';
import { useQuery } from '../hooks/useQuery';
import { Badge } from './common';

export function RolloutCombobox({
  client, serverKey, value, options, loading, onSelect, onResults,
}: {
  client: ApiClient;
  serverKey: string;
  value: string | null;
  options: Rollout[];
  loading: boolean;
  onSelect: (id: string) => void;
  onResults: (items: Rollout[]) => void;
}) {
  const [open, setOpen] = useState(false);
  const [text, setText] = useState('');
  const [debounced, setDebounced] = useState('');
  const inputRef = useRef<HTMLInputElement>(null);
  useEffect(() => {
    const id = window.setTimeout(() => setDebounced(text.trim()), 300);
    return () => window.clearTimeout(id);
  }, [text]);
  const search = useQuery(open && debounced ? `rollout-search|${serverKey}|${debounced}` : null, (signal) =>
    fetchRollouts(client, { limit: 20, offset: 0, sortBy: 'start_time', sortOrder: 'desc', rolloutIdContains: debounced }, signal));
  useEffect(() => {
    if (search.data) onResults(search.data.items);
  }, [search.data, onResults]);

  const searching = open && !!text.trim();
  const list = searching ? (debounced === text.trim() && search.data ? search.data.items : []) : options;
  const pending = searching && (debounced !== text.trim() || search.isFetching);
  const nothing = pending || (loading && !options.length) ? 'Loading...' : searching ? 'No matching rollouts' : 'No rollouts';
  const close = () => { setOpen(false); setText(''); };

  return (
    <div className="combobox" style={{ width: 260 }}>
      <input
        ref={inputRef}
        className="input"
        role="combobox"
        aria-label="Select rollout"
        aria-expanded={open}
        aria-controls="rollout-options"
        placeholder="Select rollout"
        disabled={!options.length && !loading && !value}
        value={open ? text : value ?? ''}
        onFocus={() => { setOpen(true); setText(''); }}
        onBlur={() => window.setTimeout(close, 150)}
        onChange={(e) => setText(e.target.value)}
        onKeyDown={(e) => {
          if (e.key === 'Escape') inputRef.current?.blur();
          if (e.key === 'Enter' && list[0]) { onSelect(list[0].rolloutId); inputRef.current?.blur(); }
        }}
      />
      {open && (
        <ul className="combobox-list" role="listbox" id="rollout-options" aria-label="Rollouts">
          {list.map((r) => (
            <li
              key={r.rolloutId}
              role="option"
              aria-selected={r.rolloutId === value}
              onMouseDown={(e) => { e.preventDefault(); onSelect(r.rolloutId); close(); inputRef.current?.blur(); }}
            >
              <span className="mono">{r.rolloutId}</span> <Badge kind="rollout" value={r.status} />
            </li>
          ))}
          {list.length === 0 && <li className="dim nothing-found">{nothing}</li>}
        </ul>
      )}
    </div>
  );
}
